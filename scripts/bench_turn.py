"""Benchmark of the agent runtime: a Turn's overhead at 100 and 10,000 stored messages.

The model is the real OpenAI adapter (request building, body encoding, response parsing) over
a transport that answers at once, so everything but the provider's own time is measured: the
request built from the stored history, the three middleware chains, runtime events, tool
dispatch (``calc__echo``, a sync handler), the durable event appends and the fold-commit.

Reported, in one run (docs/runtime.md "Performance"):

* the K=0 turn (one model call, no tool) at 100 and at 10,000 stored messages, and their ratio
  (goal ≤ 1.5: a step's cost must not grow with the history);
* the 20-step turn (19 tool steps + a final answer) at 100 messages (goal < 10 ms), and the
  overhead per step.

The stored history mixes plain text with tool calls and JSON tool results, the shape that made
request building expensive. The 100- and 10,000-message turns alternate (load hits both alike)
after warm-up turns; wall time is the median of many turns, and the CPU time of the same turns
(``time.process_time``, every thread: the fold-commit runs in a worker thread) is printed too,
as it is steadier on a loaded machine.

Also reported: the **observability overhead** of a 20-step turn — ``runtime-events.jsonl``
and OTLP export (to a receiver in another process) against neither — in blocks of turns whose
order rotates from round to round, each block ending with the sinks' flush so that the
writer's and exporter's threads are charged to the turns they served; the overhead is the
median of per-round ratios (docs/observability.md "Cost of all this"; target < 10 %).

Run: ``.venv/bin/python scripts/bench_turn.py`` (about 30 s). ``scripts/bench_cold.py``
measures start-up. ``scripts/bench_turn.py --instructions`` counts the observability overhead
in instructions instead (``valgrind --tool=callgrind``, a few minutes): the same figure on a
loaded machine as on an idle one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goondan.conversation.messages import Message, MessageEvent  # noqa: E402
from goondan.llm.base import LanguageModel, ModelRequest, ModelResponse, ModelSpec  # noqa: E402
from goondan.llm.http import HttpTransport  # noqa: E402
from goondan.llm.openai import OpenAIModel  # noqa: E402
from goondan.runtime import Runtime  # noqa: E402
from goondan.types import JsonObject, ToolCall, ToolCallResult  # noqa: E402
from tests.support.runtime_harness import BASIC  # noqa: E402

RATIO_GOAL = 1.5
TWENTY_GOAL_MS = 10.0
SMALL, LARGE = 100, 10_000
TURNS = 400
LONG_TURNS = 60


def _text(content: str) -> JsonObject:
    return {"choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


def _tool(step: int) -> JsonObject:
    call = {"id": f"call_{step}", "type": "function",
            "function": {"name": "calc__echo", "arguments": '{"text":"step ' + str(step) + '"}'}}
    return {"choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


class InstantTransport(HttpTransport):
    """Answers each request at once from ``plan`` (then with a plain text reply)."""

    def __init__(self) -> None:
        super().__init__(label="bench")
        self.plan: list[JsonObject] = []
        self.bytes_sent = 0

    async def post_json(
        self, url: str, body: JsonObject | bytes | list[bytes], headers: Mapping[str, str]
    ) -> JsonObject:
        self.bytes_sent += sum(map(len, body)) if isinstance(body, list) else 0
        return self.plan.pop(0) if self.plan else _text("ok")


def instant_openai() -> tuple[OpenAIModel, InstantTransport]:
    """The real OpenAI adapter over an :class:`InstantTransport` (the headline turns' model)."""
    transport = InstantTransport()
    spec = ModelSpec(provider="openai-compatible", model="bench", endpoint="http://127.0.0.1:9/v1",
                     api_key="sk-bench-0000")
    return OpenAIModel(spec, transport=transport), transport


def history(size: int) -> list[MessageEvent]:
    """``size`` stored messages: a question, a tool call, its JSON result, an answer, ..."""
    events: list[MessageEvent] = []
    index = 0
    while len(events) < size:
        events.append(MessageEvent.append(Message.user(f"question {index}: what does file {index} say?")))
        events.append(MessageEvent.append(Message.assistant("", tool_calls=[
            _call(f"h{index}", {"path": f"/tmp/file-{index}.txt"})])))
        events.append(MessageEvent.append(Message.tool_result(ToolCallResult.success(
            f"h{index}", "fs__read", {"content": "lorem ipsum dolor sit amet " * 3, "bytes": 81}))))
        events.append(MessageEvent.append(Message.assistant(f"File {index} says lorem ipsum.")))
        index += 1
    return events[:size]


def _call(call_id: str, args: dict[str, Any]) -> ToolCall:
    return ToolCall(id=call_id, name="fs__read", args=args)


async def measure(state_root: Path) -> dict[str, tuple[float, float]]:
    """Median wall and CPU milliseconds per turn: ``small`` and ``large`` K=0 turns, alternated
    so that machine load hits both alike, then ``twenty`` (20-step turns at SMALL messages)."""
    model, transport = instant_openai()
    samples: dict[str, tuple[list[float], list[float]]] = {}
    async with Runtime.from_bundle(bundle(state_root), state_root=state_root, models={"plain": model}) as rt:
        instances = {}
        for name, size in (("small", SMALL), ("large", LARGE), ("twenty", SMALL)):
            instances[name] = await rt.instance("plain", f"bench-{name}")
            await instances[name].apply_message_events(history(size))
            samples[name] = ([], [])

        async def turn(name: str, steps: int) -> None:
            transport.plan = [_tool(s) for s in range(steps - 1)]
            started, started_cpu = time.perf_counter(), time.process_time()
            result = await instances[name].run("hi", stream=False)
            samples[name][0].append(time.perf_counter() - started)
            samples[name][1].append(time.process_time() - started_cpu)
            assert result.text == "ok", result

        # Measured turns add 2 (or 40) messages each: the history grows a little during the run.
        for index in range(TURNS + 3):  # 3 warm-up turns each
            await turn("small", 1)
            await turn("large", 1)
            if index % (TURNS // LONG_TURNS) == 0:
                await turn("twenty", 20)
    return {name: (statistics.median(wall[3:]) * 1000, statistics.median(cpu[3:]) * 1000)
            for name, (wall, cpu) in samples.items()}


def bundle(where: Path) -> Path:
    """The runtime test bundle, copied with room for a 20-step turn (maxStepsPerTurn: 64)."""
    target = where / "bundle"
    if not target.exists():
        shutil.copytree(BASIC, target)
        manifest = target / "goondan.yaml"
        text = manifest.read_text(encoding="utf-8")
        manifest.write_text(text.replace("maxStepsPerTurn: 4", "maxStepsPerTurn: 64"), encoding="utf-8")
    return target


def fast_dir() -> str | None:
    """tmpfs when available: keeps fsync latency (disk, other processes) out of the figure."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def main() -> int:
    with tempfile.TemporaryDirectory(dir=fast_dir()) as tmp:
        figures = asyncio.run(measure(Path(tmp)))
    small, large, twenty = figures["small"], figures["large"], figures["twenty"]
    print("runtime overhead (instant model, state root on tmpfs); median wall / CPU per turn")
    print(f"  K=0 turn at {SMALL:>6} messages: {small[0]:7.3f} ms wall  {small[1]:7.3f} ms CPU")
    print(f"  K=0 turn at {LARGE:>6} messages: {large[0]:7.3f} ms wall  {large[1]:7.3f} ms CPU")
    ratio, cpu_ratio = large[0] / small[0], large[1] / small[1]
    print(f"  ratio {LARGE}/{SMALL}: {ratio:.2f} wall, {cpu_ratio:.2f} CPU  (goal <= {RATIO_GOAL})")
    print(f"  20-step turn at {SMALL} messages: {twenty[0]:7.3f} ms wall  {twenty[1]:7.3f} ms CPU"
          f"  (goal < {TWENTY_GOAL_MS:.0f} ms)")
    print(f"  per step: {twenty[0] / 20:6.3f} ms wall  {twenty[1] / 20:6.3f} ms CPU")
    ok = min(ratio, cpu_ratio) <= RATIO_GOAL and min(twenty) < TWENTY_GOAL_MS
    print("PASS" if ok else "OVER GOAL")
    observability_overhead()
    return 0


# -- observability overhead ----------------------------------------------------------------------
OBSERVE_STEPS = 20
OBSERVE_ROUNDS = 24
OBSERVE_BLOCK = 10
OBSERVE_TARGET = 0.10


class TwentyStepModel(LanguageModel):
    """Calls ``calc__add`` for 19 steps, then answers: one turn of 20 steps (time inside it is
    accumulated in ``spent`` and subtracted)."""

    provider = "bench"
    model = "instant"

    def __init__(self) -> None:
        self.spent = 0.0
        self.calls = 0

    async def generate(self, request: ModelRequest, *, stream: bool = False, on_delta=None):  # type: ignore[no-untyped-def]
        from goondan.types import ToolCall

        started = time.perf_counter()
        self.calls += 1
        tools = sum(1 for m in request.messages if m.get("role") == "tool")
        since_user = 0
        for message in reversed(request.messages):
            if message.get("role") == "user":
                break
            since_user += message.get("role") == "tool"
        if since_user < OBSERVE_STEPS - 1:
            response = ModelResponse(text="", finish_reason="tool_calls", tool_calls=[
                ToolCall(id=f"c{tools}", name="calc__add", args={"a": 1, "b": 2})])
        else:
            response = ModelResponse(text="done")
        self.spent += time.perf_counter() - started
        return response


class AdapterTwentyStepModel:
    """The headline 20-step turn's model: the real OpenAI adapter over :class:`InstantTransport`,
    planned with 19 ``calc__echo`` calls before each turn. All of its time is the runtime's own
    (request building, body encoding, response parsing), so nothing is subtracted (``spent``
    stays 0)."""

    def __init__(self) -> None:
        self.model, self.transport = instant_openai()
        self.spent = 0.0

    def plan(self) -> None:
        self.transport.plan = [_tool(s) for s in range(OBSERVE_STEPS - 1)]


class ScriptedTwentyStepModel:
    """The same turn with the in-process :class:`TwentyStepModel` (no adapter): the turn loop
    alone, a smaller denominator."""

    def __init__(self) -> None:
        self.model = TwentyStepModel()

    @property
    def spent(self) -> float:
        return self.model.spent

    def plan(self) -> None:
        pass


async def twenty_step_overheads(state_root: Path, exporter_url: str, *,
                                adapter: bool) -> dict[str, dict[str, float]]:
    """A 20-step turn's runtime overhead with neither, the event log, and the event log plus
    OTLP export, per turn in milliseconds. ``adapter``: the headline 20-step turn (the OpenAI
    adapter over an instant transport, as measured above); else the in-process scripted model,
    whose time is subtracted.

    The three configurations run in blocks of ``OBSERVE_BLOCK`` turns, their order rotated from
    round to round so that load from other processes hits them alike. Each block ends with the
    sinks' flush, so the block's process CPU (``time.process_time``: every thread) includes the
    writer and exporter threads' work on exactly those turns; the threads' own share is read
    from their ``thread_cpu_s`` (``time.thread_time`` around each batch). Figures are medians:
    per turn for wall and main-thread CPU, per block for the CPU with threads."""
    import contextlib

    from goondan.otlp.exporter import OtlpConfig, OtlpExporter

    configs = {"none": False, "events": True, "events+otlp": True}
    turns: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    blocks: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    walls: dict[str, list[float]] = {name: [] for name in configs}  # per block, for paired ratios
    exporter = OtlpExporter(OtlpConfig(endpoint=exporter_url))
    source = bundle(state_root) if adapter else BASIC
    async with contextlib.AsyncExitStack() as stack:
        runs = {}
        for name, event_log in configs.items():
            model: Any = AdapterTwentyStepModel() if adapter else ScriptedTwentyStepModel()
            env = {**os.environ, "GOONDAN_RUNTIME_EVENTS_MAX_BYTES": "" if event_log else "0"}
            env.pop("GOONDAN_OTLP_ENDPOINT", None)
            rt = await stack.enter_async_context(Runtime.from_bundle(
                source, state_root=state_root / name, models={"plain": model.model}, env=env, stream=False))
            instance = await rt.instance("plain", f"obs-{name}")
            instance.env.max_steps_per_turn = OBSERVE_STEPS + 5  # the fixture's Swarm allows 4
            if adapter:
                await instance.apply_message_events(history(SMALL))
            if name == "events+otlp":
                instance.observer.add_sink(exporter)
            runs[name] = (instance, model)

        def sinks(name: str) -> list[Any]:
            instance = runs[name][0]
            return [s for s in (instance.event_log, exporter if name == "events+otlp" else None)
                    if s is not None]

        async def block(name: str, count: int, record: bool) -> None:
            instance, model = runs[name]
            threads_before = sum(getattr(s, "thread_cpu_s", 0.0) for s in sinks(name))
            block_model, block_cpu = model.spent, time.process_time()
            for _ in range(count):
                model.plan()
                before = model.spent
                wall, cpu = time.perf_counter(), time.process_time()
                result = await instance.run("hi")
                model_s = model.spent - before
                if record:
                    turns[name].append(((time.perf_counter() - wall - model_s) * 1000,
                                        (time.process_time() - cpu - model_s) * 1000))
                assert result.metadata.get("stepCount", OBSERVE_STEPS) == OBSERVE_STEPS, result
            for sink in sinks(name):
                sink.flush()  # the background work of these turns, charged to this block
            total = time.process_time() - block_cpu - (model.spent - block_model)
            threads = sum(getattr(s, "thread_cpu_s", 0.0) for s in sinks(name)) - threads_before
            if record:
                blocks[name].append((total * 1000 / count, threads * 1000 / count))
                walls[name].append(statistics.median(w for w, _ in turns[name][-count:]))

        for name in configs:  # warm-up, and the exporter's connection
            await block(name, 3, record=False)
        names = list(configs)
        for index in range(OBSERVE_ROUNDS):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                await block(name, OBSERVE_BLOCK, record=True)
    await asyncio.to_thread(exporter.close)

    def paired(name: str, series: dict[str, list[Any]], pick: Any) -> float:
        # The overhead of each round against the same round's "none" blocks, then the median
        # over rounds: load that drifts between rounds cancels out.
        return float(statistics.median(pick(a) / pick(b) - 1 for a, b in zip(series[name], series["none"], strict=True)))

    return {name: {"wall": statistics.median(w for w, _ in turns[name]),
                   "cpu": statistics.median(c for _, c in turns[name]),
                   "total": statistics.median(t for t, _ in blocks[name]),
                   "threads": statistics.median(t for _, t in blocks[name]),
                   "wall_overhead": paired(name, walls, lambda v: v),
                   "total_overhead": paired(name, blocks, lambda v: v[0])}
            for name in configs}


_RECEIVER = """
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as OTLP collectors do
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def observability_overhead() -> None:
    """Events on disk + OTLP export on a 20-step turn vs. neither (state root on tmpfs): on the
    headline 20-step turn (the target), then with the in-process scripted model (no adapter).

    The OTLP receiver runs in another process, so its work is not counted as the exporter's."""
    receiver = subprocess.Popen([sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    url = f"http://127.0.0.1:{receiver.stdout.readline().strip()}/v1/traces"
    try:
        results = {}
        for adapter in (True, False):
            with tempfile.TemporaryDirectory(dir=fast_dir()) as tmp:
                results[adapter] = asyncio.run(twenty_step_overheads(Path(tmp), url, adapter=adapter))
    finally:
        receiver.terminate()
        receiver.wait(10)
    for adapter, title in ((True, "the 20-step turn above (OpenAI adapter, instant transport)"),
                           (False, "the turn loop alone (in-process scripted model, its time subtracted)")):
        figures = results[adapter]
        print(f"observability overhead on {title}; {OBSERVE_ROUNDS} rounds of {OBSERVE_BLOCK} turns per "
              "configuration, order rotated; medians; state root on tmpfs")
        for name, label in (("none", "no event log, no export"), ("events", "runtime-events.jsonl"),
                            ("events+otlp", "+ OTLP export")):
            f = figures[name]
            print(f"  {label:<24}: {f['wall']:6.3f} ms wall, {f['cpu']:6.3f} ms CPU on the turn, "
                  f"{f['total']:6.3f} ms CPU with threads ({f['threads']:5.3f} ms in writer/exporter threads)")
        for name, label in (("events", "events"), ("events+otlp", "events + export")):
            f = figures[name]
            print(f"  overhead of {label:<16}: {f['wall_overhead']:+6.1%} wall, "
                  f"{f['total_overhead']:+6.1%} CPU with threads "
                  f"(medians of per-round ratios to the same round's blocks without either)")
    total = results[True]["events+otlp"]["total_overhead"]
    print(f"  target: events + export < {OBSERVE_TARGET:.0%} of the 20-step turn's runtime overhead "
          f"(CPU with threads) -> {'PASS' if total < OBSERVE_TARGET else 'OVER TARGET'}")


# -- instruction counts (deterministic) -------------------------------------------------------------
INSTRUCTION_TURNS = (10, 40)  # the difference of the two runs is the per-turn cost (start-up cancels)


async def _instruction_child(config: str, turns: int, state_root: Path, url: str) -> None:
    """Run ``turns`` 20-step headline turns with ``config``'s sinks; their batches are processed
    on this thread every 10 turns (as the bench's block flushes do), so every instruction is
    counted in one thread, whatever the scheduling. ``turn-thread``: both sinks, their batches
    thrown away unprocessed — what the turn's own thread pays."""
    from goondan.otlp.exporter import OtlpConfig, OtlpExporter
    from goondan.runtime.eventlog import RuntimeEventLog

    model = AdapterTwentyStepModel()
    env = {**os.environ, "GOONDAN_RUNTIME_EVENTS_MAX_BYTES": "0"}
    env.pop("GOONDAN_OTLP_ENDPOINT", None)
    async with Runtime.from_bundle(bundle(state_root), state_root=state_root, models={"plain": model.model},
                                   env=env, stream=False) as rt:
        instance = await rt.instance("plain", "instructions")
        instance.env.max_steps_per_turn = OBSERVE_STEPS + 5
        await instance.apply_message_events(history(SMALL))
        sinks: list[Any] = []
        if config != "none":
            sinks.append(RuntimeEventLog(state_root / "events"))
        if config in ("events+otlp", "turn-thread"):  # to the loopback receiver (another process)
            sinks.append(OtlpExporter(OtlpConfig(endpoint=url)))
        batchers = []
        for sink in sinks:
            sink._batcher._thread = object()  # no thread: the batches are processed below
            batchers.append(sink._batcher)
            instance.observer.add_sink(sink)

        def process() -> None:
            for batcher in batchers:
                items = list(batcher._items)
                batcher._items.clear()
                if items and config != "turn-thread":
                    batcher.process(items)

        for index in range(turns):
            model.plan()
            await instance.run("hi")
            if index % 10 == 9:
                process()
        process()


def instruction_overhead() -> int:
    """Instructions per 20-step headline turn with neither, the event log, and both, counted by
    ``valgrind --tool=callgrind`` (the same count whatever else the machine does)."""
    import re
    import shutil as _shutil

    if _shutil.which("valgrind") is None:
        print("--instructions needs valgrind (apt-get install valgrind)")
        return 1
    per_turn: dict[str, float] = {}
    receiver = subprocess.Popen([sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    url = f"http://127.0.0.1:{receiver.stdout.readline().strip()}/v1/traces"
    try:
        for config in ("none", "events", "events+otlp", "turn-thread"):
            counts = []
            for turns in INSTRUCTION_TURNS:
                done = subprocess.run(
                    ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                     __file__, "--instructions-child", config, str(turns), url],
                    capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
                found = re.search(r"Collected : ([\d,]+)", done.stderr)
                assert found is not None, done.stderr[-2000:]
                counts.append(int(found.group(1).replace(",", "")))
            per_turn[config] = (counts[1] - counts[0]) / (INSTRUCTION_TURNS[1] - INSTRUCTION_TURNS[0])
    finally:
        receiver.terminate()
        receiver.wait(10)
    base = per_turn["none"]
    print(f"instructions per {OBSERVE_STEPS}-step headline turn (callgrind; the difference of "
          f"{INSTRUCTION_TURNS[1]}- and {INSTRUCTION_TURNS[0]}-turn runs; sinks' batches processed every 10 turns)")
    for config, label in (("none", "no event log, no export"), ("events", "runtime-events.jsonl"),
                          ("events+otlp", "+ OTLP export"), ("turn-thread", "  of it, the turn's thread")):
        print(f"  {label:<26}: {per_turn[config] / 1e6:7.2f} M  ({per_turn[config] / base - 1:+6.1%})")
    for config, reading in (("events+otlp", "the writer's and exporter's threads charged to the turn"),
                            ("turn-thread", "what the turn's own thread pays (the threads run while it "
                                            "awaits the model)")):
        overhead = per_turn[config] / base - 1
        print(f"  target: events + export < {OBSERVE_TARGET:.0%}, {reading} -> "
              f"{'PASS' if overhead < OBSERVE_TARGET else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--instructions"]:
        raise SystemExit(instruction_overhead())
    if sys.argv[1:2] == ["--instructions-child"]:
        with tempfile.TemporaryDirectory(dir=fast_dir()) as tmp:
            asyncio.run(_instruction_child(sys.argv[2], int(sys.argv[3]), Path(tmp), sys.argv[4]))
        raise SystemExit(0)
    raise SystemExit(main())
