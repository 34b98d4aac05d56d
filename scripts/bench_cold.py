"""Cold-start benchmark: ``goondan repl --input`` and ``goondan run --input`` against ``python -c pass``.

Each command runs as a fresh process against a fake OpenAI server on 127.0.0.1 that records a
monotonic timestamp per request (tests/support/fake_provider.py). Reported (median of RUNS,
alternating the commands so machine load hits them alike; docs/runtime.md "Performance"):

* ``python -c pass`` (the same interpreter): the floor;
* ``goondan repl --input hi``: whole process, and its ratio to the floor (goal ≤ 6), with a warm
  bundle cache (the normal repeated use; docs/bundle-cache.md) and with a cold one (an empty
  ``GOONDAN_CACHE_DIR`` per run: parse, validate and write the entry);
* ``goondan repl`` and ``goondan run``: time from the process start to the first model request
  (goal for ``run``: < 250 ms; warm cache);
* the CPU time of each whole process (steadier than wall time on a loaded machine).

Run: ``.venv/bin/python scripts/bench_cold.py [RUNS]`` (default 7 runs, about 20 s).
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_provider import FakeProvider  # noqa: E402
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle, goondan_cmd  # noqa: E402

RATIO_GOAL = 6.0
RUN_FIRST_REQUEST_GOAL_MS = 250.0


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict[str, str], fake: FakeProvider | None) -> tuple[float, float, float]:
    """(whole process ms, ms to the first model request or nan, CPU ms) of one run of ``cmd``."""
    seen = len(fake.requests) if fake is not None else 0
    if fake is not None:
        fake.enqueue("hello")
    cpu = _child_cpu()
    started = time.monotonic()
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
    whole = (time.monotonic() - started) * 1000
    first = float("nan")
    if fake is not None:
        requests = fake.requests
        assert len(requests) > seen, "the command sent no model request"
        first = (requests[seen].timestamp - started) * 1000
    return whole, first, (_child_cpu() - cpu) * 1000


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    # A user's install has its bytecode compiled (pip does it); this checkout may run with
    # PYTHONDONTWRITEBYTECODE set, which would charge every start the compilation of the source.
    compileall.compile_dir(str(ROOT / "goondan"), quiet=2)
    compileall.compile_path(quiet=2)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    figures: dict[str, list[tuple[float, float, float]]] = {"floor": [], "repl": [], "repl-cold": [], "run": []}
    with tempfile.TemporaryDirectory(dir=shm) as tmp, FakeProvider() as fake:
        bundle = fake_provider_bundle(Path(tmp), fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-bench-cold", "GOONDAN_STATE_ROOT": str(Path(tmp) / "state")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for key in ("GOONDAN_NO_CACHE", "GOONDAN_CACHE_DIR"):
            env.pop(key, None)
        # One untimed start writes the bundle cache entry every later (warm) start reuses.
        timed(goondan_cmd("repl", "--bundle", str(bundle), "--instance", "warmup", "--input", "hi"), env, fake)
        for index in range(runs):
            figures["floor"].append(timed([sys.executable, "-c", "pass"], env, None))
            figures["repl"].append(timed(goondan_cmd(
                "repl", "--bundle", str(bundle), "--instance", f"repl{index}", "--input", "hi"), env, fake))
            cold_env = {**env, "GOONDAN_CACHE_DIR": str(Path(tmp) / f"cold-cache-{index}")}
            figures["repl-cold"].append(timed(goondan_cmd(
                "repl", "--bundle", str(bundle), "--instance", f"cold{index}", "--input", "hi"), cold_env, fake))
            figures["run"].append(timed(goondan_cmd(
                "run", "--bundle", str(bundle), "--instance", f"run{index}", "--input", "hi"), env, fake))

    def median(name: str, column: int) -> float:
        return statistics.median(row[column] for row in figures[name])

    floor = median("floor", 0)
    print(f"cold start, median of {runs} runs (state root on tmpfs; warm bundle cache unless said)")
    print(f"  python -c pass                  {floor:7.1f} ms  CPU {median('floor', 2):6.1f} ms")
    repl = median("repl", 0)
    cpu_ratio = median("repl", 2) / median("floor", 2)
    print(f"  goondan repl --input  whole     {repl:7.1f} ms  CPU {median('repl', 2):6.1f} ms"
          f"  ratio {repl / floor:.1f}x, CPU {cpu_ratio:.1f}x (goal <= {RATIO_GOAL:.0f}x)")
    print(f"  goondan repl --input  1st req.  {median('repl', 1):7.1f} ms")
    cold = median("repl-cold", 0)
    print(f"  repl, cold cache      whole     {cold:7.1f} ms  CPU {median('repl-cold', 2):6.1f} ms"
          f"  ratio {cold / floor:.1f}x  1st req. {median('repl-cold', 1):.1f} ms")
    run_first = median("run", 1)
    print(f"  goondan run --input   whole     {median('run', 0):7.1f} ms  CPU {median('run', 2):6.1f} ms")
    print(f"  goondan run --input   1st req.  {run_first:7.1f} ms  (goal < {RUN_FIRST_REQUEST_GOAL_MS:.0f} ms)")
    ok = repl / floor <= RATIO_GOAL and run_first < RUN_FIRST_REQUEST_GOAL_MS
    print("PASS" if ok else "OVER GOAL")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
