"""A hung MCP server: one start attempt per turn at most, backoff across turns, a span for the wait.

Issue 27: a server that never answers ``initialize`` made every step of a turn pay the start
timeout again (a 4-step turn took 192 s). Here the start timeout is 300 ms and each model reply
"takes" 10 s on the provider's clock (a fake one, advanced by the model), as a slow LLM would:
the 0.5 s backoff has long passed when the next step builds its catalog.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.config import AgentSpec
from goondan.config.bundle import ModelBinding
from goondan.config.mcp import McpServerSpec
from goondan.conversation.state import ConversationState
from goondan.llm.base import ModelRequest
from goondan.llm.testing import FunctionModel
from goondan.mcp import McpToolProvider
from goondan.pipeline.registry import PipelineRegistry
from goondan.pipeline.tracing import start_span
from goondan.runtime.inputs import UnavailableAgents
from goondan.runtime.observe import RuntimeObserver
from goondan.runtime.turn import TurnEnv, TurnRunner
from goondan.tools.executor import ToolExecutor
from goondan.tools.registry import ToolRegistry
from goondan.types import AgentEvent, ToolSource
from tests.support.aio import run
from tests.support.mcp_servers import pid_alive

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
START_TIMEOUT_MS = 300
# Says something on stderr, then never answers (it exits when its stdin closes, so closing it
# takes no kill grace period).
HUNG = "import sys; print('loading the index ...', file=sys.stderr, flush=True); sys.stdin.read()"


class Clock:
    """The provider's clock: the test moves it (a model reply takes ``step_s``)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step_s = 10.0

    def __call__(self) -> float:
        return self.now


class Records(logging.Handler):
    """Collects the provider's log records."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def start_failures(self) -> int:
        """Start attempts that failed: each logs one warning."""
        return sum(1 for r in self.records if r.levelno == logging.WARNING)


CALC_THRICE: list[Any] = [*[{"toolCalls": [{"name": "calc__add", "args": {}}]}] * 3, "done"]


class Agent:
    """A TurnRunner loop whose model replies with ``script`` (by default: calls ``calc__add``
    three times, then answers), each reply moving the provider's clock by ``clock.step_s``."""

    def __init__(self, clock: Clock, name: str, server: McpServerSpec | None = None,
                 script: list[Any] = CALC_THRICE) -> None:
        self.clock = clock
        server = server or McpServerSpec(name="hung", package=None, url=None,
                                         command=[sys.executable, "-c", HUNG],
                                         start_timeout_ms=START_TIMEOUT_MS)
        self.log = Records()
        logger = logging.getLogger(f"tests.mcp.{name}")
        logger.propagate = False
        logger.addHandler(self.log)
        self.provider = McpToolProvider(server, clock=clock, logger=logger)
        self.tools = ToolRegistry()
        self.tools.register({"name": "calc__add", "parameters": {"type": "object"}},
                            lambda ctx, args: 2, source=ToolSource("extension", "calc"))
        self.observer = RuntimeObserver("a", "k")
        self.events: list[dict[str, Any]] = []
        self.observer.subscribe(self.events.append)
        self.calls = 0

        def reply(request: ModelRequest) -> Any:
            clock.now += clock.step_s
            self.calls += 1
            return script[(self.calls - 1) % len(script)]

        spec = AgentSpec(name="a", model=ModelBinding("m", "scripted", "scripted"), params={},
                         system_prompt="", tools=[], extensions=[], required_tools=[],
                         parallel_tool_calls=False, workdir=Path("."), max_steps_per_turn=8,
                         resource=None)
        self.env = TurnEnv(spec=spec, instance_key="k", model=FunctionModel(reply),
                           pipeline=PipelineRegistry(), tools=self.tools,
                           executor=ToolExecutor(self.tools), observer=self.observer,
                           max_steps_per_turn=8, workdir=Path("."))
        self.state = ConversationState(())
        self.turns = 0

    async def turn(self) -> int:
        """Run one turn of the script; returns its number of steps."""
        self.turns += 1
        runner = TurnRunner(self.env, self.state, self.state.emit,
                            AgentEvent(type="message", input="hi"), turn_id=f"turn_{self.turns}",
                            span=start_span("turn", "turn"), agents=UnavailableAgents())
        result = await runner.run(stream=False)
        assert result.finish_reason == "text_response"
        return len(runner.turn.steps)

    def tool_errors(self) -> list[str | None]:
        """The error code of every tool result of the conversation, in order."""
        codes: list[str | None] = []
        for message in self.state.next_messages:
            for part in message.data["content"] if message.data["role"] == "tool" else []:
                output = part["output"]
                codes.append(output.get("value", {}).get("code") if output["type"] == "error-json"
                             else None)
        return codes


def test_a_hung_server_is_started_once_per_turn_and_backs_off_across_turns() -> None:
    clock = Clock()

    async def body() -> None:
        agent = Agent(clock, "once-per-turn")
        await agent.tools.add_provider(agent.provider)
        try:
            assert await agent.turn() == 4
            assert agent.log.start_failures == 1, "each step of the turn paid the start timeout"
            assert agent.provider.state == "failed"
            # The next turn (the 0.5 s backoff is long over): one attempt, then none in its steps.
            assert await agent.turn() == 4
            assert agent.log.start_failures == 2
            # From now on the model answers at once: the clock stands still unless moved here.
            clock.step_s = 0.0
            await agent.turn()
            assert agent.log.start_failures == 3
            # A turn while backing off (2 s after the third failure): no attempt at all.
            await agent.turn()
            assert agent.log.start_failures == 3
            status = agent.provider.status()
            assert status["state"] == "failed" and status["retryInMs"] == 2000
            clock.now += 2.0
            await agent.turn()
            assert agent.log.start_failures == 4
        finally:
            await agent.tools.aclose()
    run(body(), timeout_s=60)


def test_the_start_wait_is_inside_the_step_span() -> None:
    clock = Clock()

    async def body() -> list[dict[str, Any]]:
        agent = Agent(clock, "span")
        await agent.tools.add_provider(agent.provider)
        try:
            await agent.turn()
        finally:
            await agent.tools.aclose()
        return agent.events
    events = run(body(), timeout_s=60)
    steps = [e for e in events if e["type"] == "step.completed"]
    assert steps[0]["stepIndex"] == 0
    # The first step's catalog waited for the start timeout: its span covers that time.
    assert steps[0]["latencyMs"] >= START_TIMEOUT_MS


def test_a_start_failure_logs_the_server_stderr_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crashing = McpServerSpec(name="boom", package=None, url=None, start_timeout_ms=5000, command=[
        sys.executable, "-c",
        "import sys; print('fatal: no API key in MY_SERVER_KEY', file=sys.stderr); sys.exit(2)"])
    # Long enough for the interpreter to start and print on a loaded machine.
    hung = McpServerSpec(name="hung", package=None, url=None, start_timeout_ms=1000,
                         command=[sys.executable, "-c", HUNG])

    async def body() -> None:
        for spec in (crashing, hung):
            provider = McpToolProvider(spec)
            await provider.open(lambda p: None)
            try:
                assert await provider.list_tools() == []
            finally:
                await provider.aclose()

    with caplog.at_level(logging.WARNING, logger="goondan.mcp"):
        run(body(), timeout_s=60)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    crashed = next(m for m in warnings if "boom" in m)
    assert "fatal: no API key in MY_SERVER_KEY" in crashed
    hanged = next(m for m in warnings if "hung" in m)
    assert "loading the index ..." in hanged and "initialize" in hanged


# Serves two tools, ``die`` (exits at once) and ``echo``; started again after that, it says why
# on stderr and never answers (a server stuck on a lock its crashed self left behind).
RESTART_HANGS = r"""
import json, os, sys
if os.path.exists(sys.argv[1]):
    print("waiting for the lock file", file=sys.stderr, flush=True)
    sys.stdin.read()
    raise SystemExit
open(sys.argv[1], "w").close()
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
              {"name": n, "inputSchema": {"type": "object"}} for n in ("die", "echo")]}})
    elif method == "tools/call":
        if msg["params"]["name"] == "die":
            os._exit(3)
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "ok"}]}})
"""


def test_a_restart_that_hangs_in_a_tool_call_is_not_retried_in_that_turn(tmp_path: Path) -> None:
    # The server dies in the step's first call; the second call of the step restarts it, and
    # that start hangs. The next step's catalog must not pay the start timeout again.
    clock = Clock()
    server = McpServerSpec(name="raw", package=None, url=None, start_timeout_ms=10_000,
                           command=[sys.executable, "-c", RESTART_HANGS, str(tmp_path / "lock")])
    script: list[Any] = [
        {"toolCalls": [{"name": "raw__die", "args": {}}, {"name": "raw__echo", "args": {}}]},
        {"toolCalls": [{"name": "raw__echo", "args": {}}]},
        {"toolCalls": [{"name": "calc__add", "args": {}}]},
        "done"]

    async def body() -> None:
        agent = Agent(clock, "restart", server, script)
        await agent.tools.add_provider(agent.provider)
        try:
            await agent.provider.session()  # the first start, with room for a loaded machine
            agent.provider.spec.start_timeout_ms = START_TIMEOUT_MS
            assert await agent.turn() == 4
            assert agent.log.start_failures == 1, "the next step started the hung server again"
            # die: the server closed; echo: its restart hung; echo again: no longer offered.
            assert agent.tool_errors() == ["E_MCP_CLOSED", "E_MCP_TIMEOUT",
                                           "E_TOOL_NOT_IN_CATALOG", None]
        finally:
            await agent.tools.aclose()
    run(body(), timeout_s=60)


def test_a_server_that_ignores_stdin_eof_does_not_add_the_kill_grace_to_the_step(
        tmp_path: Path) -> None:
    # Closing such a server waits 2 s for it to exit before SIGTERM. The step used to wait for
    # that too; now the close runs behind it, and closing the provider still ends the process.
    pid_file = tmp_path / "pid"
    stuck = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid()));"
             " time.sleep(600)")
    spec = McpServerSpec(name="stuck", package=None, url=None, start_timeout_ms=1000,
                         command=[sys.executable, "-c", stuck, str(pid_file)])

    async def body() -> tuple[float, int | None]:
        provider = McpToolProvider(spec)
        await provider.open(lambda p: None)
        try:
            started = time.monotonic()
            assert await provider.list_tools() == []
            elapsed = time.monotonic() - started
        finally:
            await provider.aclose()
        pid = int(pid_file.read_text()) if pid_file.exists() and pid_file.read_text() else None
        return elapsed, pid

    elapsed, pid = run(body(), timeout_s=60)
    # Failure-only bound: 1 s of start timeout plus the 2 s grace was at least 3 s.
    assert elapsed < 2.5, elapsed
    if pid is not None:
        assert not pid_alive(pid), "the provider's close left the server running"


# Answers initialize, then never answers tools/list; each tools/list it reads leaves a line in
# the file named by its argument.
LIST_HANGS = r"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"}}}) + "\n")
        sys.stdout.flush()
    elif msg.get("method") == "tools/list":
        with open(sys.argv[1], "a") as marks:
            marks.write("list\n")
"""


def test_a_server_that_never_lists_its_tools_is_asked_once_per_turn(tmp_path: Path) -> None:
    clock, marks = Clock(), tmp_path / "lists"
    server = McpServerSpec(name="mute", package=None, url=None, timeout_ms=START_TIMEOUT_MS,
                           start_timeout_ms=10_000,
                           command=[sys.executable, "-c", LIST_HANGS, str(marks)])

    async def body() -> None:
        agent = Agent(clock, "list", server)
        await agent.tools.add_provider(agent.provider)
        try:
            assert await agent.turn() == 4
        finally:
            await agent.tools.aclose()  # the server reads all it was sent before it exits
    run(body(), timeout_s=60)
    assert marks.read_text().splitlines() == ["list"], "each step waited for tools/list again"
