"""``goondan validate --check-mcp``, ``goondan doctor`` and an in-process agent with an MCP Tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from goondan.console.backend import InstanceBackend
from goondan.console.session import format_mcp_status
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.cli_main import run as _cli
from tests.support.mcp_servers import pid_alive, require_sdk, server_command, wait_for

require_sdk()


def _bundle(root: Path, command: list[str], script: list[Any] | None = None) -> Path:
    docs = [
        {"apiVersion": "goondan.ai/v1", "kind": "Model", "metadata": {"name": "m"},
         "spec": {"provider": "scripted", "model": "x",
                  "options": {"script": script or ["hi"]}}},
        {"apiVersion": "goondan.ai/v1", "kind": "Tool", "metadata": {"name": "srv"},
         "spec": {"mcp": {"command": command, "timeoutMs": 20000}}},
        {"apiVersion": "goondan.ai/v1", "kind": "Agent", "metadata": {"name": "a"},
         "spec": {"prompt": {"system": "s"}, "modelConfig": {"modelRef": "Model/m"},
                  "tools": ["Tool/srv"]}},
        {"apiVersion": "goondan.ai/v1", "kind": "Swarm", "metadata": {"name": "default"},
         "spec": {"entryAgent": "Agent/a", "agents": ["Agent/a"]}},
    ]
    root.mkdir(parents=True, exist_ok=True)
    (root / "goondan.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return root


def test_validate_check_mcp_lists_tools_and_reports_failures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _bundle(tmp_path / "good", server_command())
    code, out, err = _cli(capsys, "validate", str(good), "--check-mcp")
    assert code == 0, out + err
    assert "MCP servers" in out and "srv__echo" in out
    code, out, _ = _cli(capsys, "validate", str(good), "--check-mcp", "--format", "json")
    data = json.loads(out)
    [server] = data["mcp"]
    assert server["ok"] and "srv__add" in server["tools"]
    # Without the flag no server is started and the output has no MCP section.
    code, out, _ = _cli(capsys, "validate", str(good))
    assert code == 0 and "MCP servers" not in out

    bad = _bundle(tmp_path / "bad", ["goondan-no-such-mcp-server"])
    code, out, _ = _cli(capsys, "validate", str(bad), "--check-mcp")
    assert code == 4
    assert "[E_MCP_START]" in out


def test_doctor_shows_each_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(tmp_path / "b", server_command())
    code, out, _ = _cli(
        capsys, "doctor", "--bundle", str(bundle), "--state-root", str(tmp_path / "s")
    )
    assert code == 0, out
    assert "✓ [MCP] Tool/srv: ready (stdio" in out
    missing = _bundle(tmp_path / "m", ["goondan-no-such-mcp-server"])
    code, out, _ = _cli(
        capsys, "doctor", "--bundle", str(missing), "--state-root", str(tmp_path / "s")
    )
    assert code == 1 and "✗ [MCP] Tool/srv" in out and "not on PATH" in out


def test_an_agent_turn_calls_the_server_and_close_stops_it(
    tmp_path: Path, state_root: Path
) -> None:
    script = [{"toolCalls": [{"name": "srv__add", "args": {"a": 20, "b": 22}}]},
              {"text": "sum={{toolResult.result}}"},
              {"toolCalls": [{"name": "srv__pid", "args": {}}]},
              {"text": "pid={{toolResult.result}}"}]
    bundle = _bundle(tmp_path / "b", server_command(), script)

    async def body() -> tuple[int, list[str]]:
        async with Runtime.from_bundle(bundle, state_root=state_root) as rt:
            instance = await rt.instance()
            backend = InstanceBackend(instance)
            [idle] = backend.mcp_servers()
            assert idle["state"] == "idle"
            assert "starts at the first step" in format_mcp_status(idle)
            first = await rt.run_turn(None, "add")
            assert first.response_message is not None and first.response_message.text == "sum=42"
            second = await rt.run_turn(None, "pid")
            assert second.response_message is not None
            pid = int(second.response_message.text.split("=")[1])
            [ready] = backend.mcp_servers()
            assert ready["state"] == "ready" and ready["pid"] == pid
            assert ready["sessionsStarted"] == 1
            lines = [format_mcp_status(ready)]
        return pid, lines

    pid, lines = run(body(), timeout_s=90)
    assert "ready · stdio pid" in lines[0]
    wait_for(lambda: not pid_alive(pid))


def test_run_chat_inspect_state_carries_mcp_servers() -> None:
    """``goondan run``'s chat asks the agent process (runtime.inspect "state"): the answer
    carries each MCP server's state for /tools."""
    from types import SimpleNamespace

    from goondan.ipc import queries
    from goondan.mcp import McpToolProvider
    from goondan.tools.registry import ToolRegistry
    from tests.support.mcp_servers import stdio_spec

    async def body() -> Any:
        registry = ToolRegistry()
        await registry.add_provider(McpToolProvider(stdio_spec("srv")))
        handler = SimpleNamespace(tools=registry, messages=[], status="idle")
        try:
            return await queries._result(handler, "state")
        finally:
            await registry.aclose()

    state = run(body(), timeout_s=30)
    [server] = state["mcp"]
    assert server["name"] == "srv" and server["state"] == "idle"
    assert json.loads(json.dumps(state["mcp"])) == state["mcp"]
