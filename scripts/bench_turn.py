"""Benchmarks of the agent runtime (issue 6): per-step overhead and REPL cold start.

1. **Runtime overhead per step**, excluding provider time: an ``AgentInstance`` whose model
   answers instantly (the time spent inside the model is measured and subtracted) runs one-step
   turns over a conversation of 100, 1,000 and 10,000 messages. Overhead = turn wall time −
   model time; it includes building the request (``to_llm_messages``), the three middleware
   chains, runtime events, the durable event appends and the fold-commit. Target: < 2 ms at
   100 messages; the growth at 1,000 and 10,000 is reported.
2. **``goondan repl --input hi`` cold start** to the first request reaching the provider (the
   fake provider server records a monotonic timestamp per request). Target: < 300 ms.

Run: ``.venv/bin/python scripts/bench_turn.py`` (about 10 s).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goondan.conversation.messages import Message, MessageEvent  # noqa: E402
from goondan.llm.base import LanguageModel, ModelRequest, ModelResponse  # noqa: E402
from goondan.runtime import Runtime  # noqa: E402
from tests.support.fake_provider import FakeProvider  # noqa: E402
from tests.support.runtime_harness import (  # noqa: E402
    BASIC,
    FAKE_KEY_ENV,
    fake_provider_bundle,
    goondan_cmd,
)

STEP_TARGET_MS = 2.0
COLD_TARGET_MS = 300.0
SIZES = (100, 1_000, 10_000)
TURNS = 200


class InstantModel(LanguageModel):
    """Answers at once; accumulates the time spent inside ``generate``."""

    provider = "bench"
    model = "instant"

    def __init__(self) -> None:
        self.spent = 0.0
        self.calls = 0

    async def generate(self, request: ModelRequest, *, stream: bool = False, on_delta=None):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        self.calls += 1
        response = ModelResponse(text="ok")
        self.spent += time.perf_counter() - started
        return response


def fast_dir() -> str | None:
    """tmpfs when available: keeps fsync latency (disk, other processes) out of the figure."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


async def overhead_at(size: int, state_root: Path) -> float:
    model = InstantModel()
    async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
        instance = await rt.instance("plain", f"bench-{size}")
        seed = []
        for index in range(size // 2):
            seed.append(MessageEvent.append(Message.user(f"question {index}")))
            seed.append(MessageEvent.append(Message.assistant(f"answer {index}")))
        await instance.apply_message_events(seed)
        for _ in range(5):  # warm-up
            await instance.run("warm up")
        model.spent, samples = 0.0, []
        for _ in range(TURNS):
            before = model.spent
            started = time.perf_counter()
            await instance.run("hi")
            samples.append((time.perf_counter() - started) - (model.spent - before))
        return statistics.median(samples) * 1000


def cold_start_ms(runs: int = 7) -> tuple[float, float]:
    """Median wall time to the first provider request, and median CPU time of a whole run."""
    import resource

    samples, cpu = [], []
    with tempfile.TemporaryDirectory(dir=fast_dir()) as tmp, FakeProvider() as fake:
        bundle = fake_provider_bundle(Path(tmp), fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-bench", "GOONDAN_STATE_ROOT": str(Path(tmp) / "state")}
        for index in range(runs):
            fake.enqueue("hello")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            subprocess.run(
                goondan_cmd("repl", "--bundle", str(bundle), "--instance", f"cold{index}", "--input", "hi"),
                env=env, check=True, capture_output=True, timeout=60,
            )
            samples.append((fake.requests[-1].timestamp - started) * 1000)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) * 1000)
    return statistics.median(samples), statistics.median(cpu)


def main() -> int:
    results: dict[int, float] = {}
    for label, directory in (("state root on tmpfs", fast_dir()), ("state root on disk (fsync)", None)):
        print(f"runtime overhead per step, model time excluded, median of {TURNS} one-step turns; {label}")
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            figures = {size: asyncio.run(overhead_at(size, Path(tmp))) for size in SIZES}
        for size, value in figures.items():
            ratio = value / figures[SIZES[0]]
            target = f"  target < {STEP_TARGET_MS} ms: {value / STEP_TARGET_MS:.2f}x" if size == 100 else ""
            print(f"  {size:>6} messages: {value:7.3f} ms/step  (x{ratio:.1f} vs 100){target}")
        results = results or figures
    cold, cpu = cold_start_ms()
    print("goondan repl --input hi: cold start to the first provider request (state root on tmpfs)")
    print(f"  median {cold:.0f} ms wall  target < {COLD_TARGET_MS:.0f} ms: {cold / COLD_TARGET_MS:.2f}x"
          f"  (CPU of the whole run: {cpu:.0f} ms)")
    ok = results[SIZES[0]] < STEP_TARGET_MS and cold < COLD_TARGET_MS
    print("PASS" if ok else "OVER TARGET")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
