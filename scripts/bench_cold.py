"""Cold-start benchmark: ``goondan repl --input`` and ``goondan run --input`` against
``python -c pass``.

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

``--without NAME`` (repeatable) also runs every command with one start-up mechanism switched
off, interleaved with the normal runs, and prints each variant's figures and its difference to
the normal ones — what the mechanism buys, side by side in one run. The switch is made from
outside the code under test: every measured process (the agent processes too) gets a
``sitecustomize`` that patches the named mechanism right after its module is imported. Names:
``codecache``, ``fork-server``, ``gc-pause``, ``lazy-config`` (see ``WITHOUT``).

``--instructions`` counts instead of timing: each variant's ``repl --input``, ``run --input``
and ``stop`` (a short command; no swarm is running, so it only finds that out) run once under
``valgrind --tool=callgrind --trace-children=yes`` (every process of the command, agent processes
included, about a minute per variant), and the instructions of all processes are added up — the same
figure on a loaded machine as on an idle one. It does not see what runs in parallel (the fork
server's template, started early, saves wall time, not instructions): time ``fork-server``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
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

# Each switch: the module it patches, and the statement run with that module as ``module``.
WITHOUT: dict[str, tuple[str, str]] = {
    # compiled dataclass methods of earlier starts (goondan/codecache.py) are not installed
    "codecache": ("goondan.codecache", "module.install = lambda *args, **kwargs: None"),
    # no fork server: agent processes are spawned (goondan/swarm/forktemplate.py)
    "fork-server": ("goondan.swarm.forktemplate", "module.fork_server_enabled = lambda *a: False"),
    # the collector is neither paused during start-up nor frozen after it (goondan/__main__.py,
    # commands/common.py defer_gc/startup_done, the fork template's imports)
    "gc-pause": ("gc", "module.disable = module.freeze = lambda: None"),
    # the package exports of goondan.config are imported with the package
    # (goondan/config/__init__.py)
    "lazy-config": (
        "goondan.config",
        "[__import__(f'goondan.config.{home}') for home in sorted(set(module._HOME.values()))]",
    ),
}
SITECUSTOMIZE = """
import importlib.machinery, os, sys
_switches = {switches!r}
_wanted = {{_switches[name][0]: _switches[name][1]
           for name in os.environ.get("GOONDAN_BENCH_WITHOUT", "").split(",") if name}}

if "gc" in _wanted:
    import gc as module
    exec(_wanted.pop("gc"))

class _PatchAfterImport:
    def find_spec(self, name, path=None, target=None):
        if name not in _wanted:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module, run=run, code=_wanted[name]):
            run(module)
            exec(code)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _PatchAfterImport())
"""

RATIO_GOAL = 6.0
RUN_FIRST_REQUEST_GOAL_MS = 250.0


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(
    cmd: list[str], env: dict[str, str], fake: FakeProvider | None
) -> tuple[float, float, float]:
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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="?", type=int, default=7)
    parser.add_argument("--without", action="append", default=[], choices=sorted(WITHOUT),
                        help="also measure with this start-up mechanism switched off")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions under callgrind instead of timing (needs valgrind)",
    )
    args = parser.parse_args()
    runs: int = args.runs
    variants = ["", *args.without]
    # A user's install has its bytecode compiled (pip does it); this checkout may run with
    # PYTHONDONTWRITEBYTECODE set, which would charge every start the compilation of the source.
    compileall.compile_dir(str(ROOT / "goondan"), quiet=2)
    compileall.compile_path(quiet=2)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    figures: dict[str, dict[str, list[tuple[float, float, float]]]] = {
        variant: {"floor": [], "repl": [], "repl-cold": [], "run": []} for variant in variants}
    with tempfile.TemporaryDirectory(dir=shm) as tmp, FakeProvider() as fake:
        bundle = fake_provider_bundle(Path(tmp), fake.base_url("openai"))
        env = {
            **os.environ,
            FAKE_KEY_ENV: "sk-bench-cold",
            "GOONDAN_STATE_ROOT": str(Path(tmp) / "state"),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for key in ("GOONDAN_NO_CACHE", "GOONDAN_CACHE_DIR", "GOONDAN_BENCH_WITHOUT"):
            env.pop(key, None)
        if args.without:  # every variant (the normal one too) imports the same sitecustomize
            site = Path(tmp) / "site"
            site.mkdir()
            (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(switches=WITHOUT))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
        # One untimed start writes the bundle cache entry every later (warm) start reuses.
        timed(
            goondan_cmd("repl", "--bundle", str(bundle), "--instance", "warmup", "--input", "hi"),
            env,
            fake,
        )
        if args.instructions:
            return count_instructions(variants, env, bundle, Path(tmp), fake)
        for index in range(runs):
            for variant in variants[index % len(variants):] + variants[:index % len(variants)]:
                venv = {**env, "GOONDAN_BENCH_WITHOUT": variant}
                rows, tag = figures[variant], f"{variant or 'normal'}{index}"
                rows["floor"].append(timed([sys.executable, "-c", "pass"], venv, None))
                rows["repl"].append(
                    timed(
                        goondan_cmd(
                            "repl",
                            "--bundle",
                            str(bundle),
                            "--instance",
                            f"repl-{tag}",
                            "--input",
                            "hi",
                        ),
                        venv,
                        fake,
                    )
                )
                cold_env = {**venv, "GOONDAN_CACHE_DIR": str(Path(tmp) / f"cold-cache-{tag}")}
                rows["repl-cold"].append(
                    timed(
                        goondan_cmd(
                            "repl",
                            "--bundle",
                            str(bundle),
                            "--instance",
                            f"cold-{tag}",
                            "--input",
                            "hi",
                        ),
                        cold_env,
                        fake,
                    )
                )
                rows["run"].append(
                    timed(
                        goondan_cmd(
                            "run",
                            "--bundle",
                            str(bundle),
                            "--instance",
                            f"run-{tag}",
                            "--input",
                            "hi",
                        ),
                        venv,
                        fake,
                    )
                )

    normal = report(figures[""], runs)
    for variant in args.without:
        print(f"\nwithout {variant} (interleaved with the runs above)")
        report(figures[variant], runs, normal)
    return 0


def count_instructions(variants: list[str], env: dict[str, str], bundle: Path, tmp: Path,
                       fake: FakeProvider) -> int:
    """Instructions of every process of ``repl --input``, ``run --input`` and ``stop`` per
    variant."""
    import re

    if shutil.which("valgrind") is None:
        print("--instructions needs valgrind (apt-get install valgrind)")
        return 1
    counts: dict[str, dict[str, int]] = {}
    for variant in variants:
        venv = {**env, "GOONDAN_BENCH_WITHOUT": variant, "PYTHONHASHSEED": "0"}
        counts[variant] = {}
        for command in ("repl", "run", "stop"):
            # a run that failed (slowed down tenfold, timing-dependent) is retried
            for attempt in range(3):
                logs = tmp / f"callgrind-{variant or 'normal'}-{command}-{attempt}"
                logs.mkdir()
                cmd = [
                    "valgrind",
                    "--tool=callgrind",
                    "--trace-children=yes",
                    "--callgrind-out-file=/dev/null",
                    f"--log-file={logs}/%p.log",
                    *goondan_cmd(command, "--bundle", str(bundle)),
                ]
                if command != "stop":
                    cmd += ["--instance", f"ir-{variant or 'normal'}", "--input", "hi"]
                    fake.enqueue("hello")
                done = subprocess.run(
                    cmd, env=venv, capture_output=True, text=True, timeout=600, check=False
                )
                if done.returncode == 0 or command == "stop":
                    break
                print(
                    f"{command} failed under valgrind (attempt "
                    f"{attempt + 1}):\n{done.stderr[-1000:]}"
                )
            else:
                raise SystemExit(f"{command} failed three times under valgrind")
            total = 0
            for log in logs.glob("*.log"):
                found = re.search(r"Collected : ([\d,]+)", log.read_text())
                total += int(found.group(1).replace(",", "")) if found else 0
            counts[variant][command] = total
    print("instructions of all processes (callgrind), one run each; warm bundle cache")
    for variant in variants:
        cells = []
        for command in ("repl", "run", "stop"):
            value, normal = counts[variant][command], counts[""][command]
            cells.append(
                f"{command} {value / 1e6:8.1f} M"
                + (f" ({(value / normal - 1) * 100:+5.1f} %)" if variant else "")
            )
        print(f"  {('without ' + variant) if variant else 'normal':<24} {'   '.join(cells)}")
    return 0


def report(figures: dict[str, list[tuple[float, float, float]]], runs: int,
           normal: dict[str, float] | None = None) -> dict[str, float]:
    """Print one variant's medians (with their change against ``normal``) and return them."""

    def median(name: str, column: int) -> float:
        return statistics.median(row[column] for row in figures[name])

    values = {f"{name}/{column}": median(name, column) for name in figures for column in range(3)}

    def show(key: str) -> str:
        value = values[key]
        if normal is None:
            return f"{value:7.1f} ms"
        return (
            f"{value:7.1f} ms ({value - normal[key]:+6.1f} "
            f"ms, {(value / normal[key] - 1) * 100:+5.1f} %)"
        )

    floor = values["floor/0"]
    print(f"cold start, median of {runs} runs (state root on tmpfs; warm bundle cache unless said)")
    print(f"  python -c pass                  {show('floor/0')}  CPU {show('floor/2')}")
    repl = values["repl/0"]
    print(
        f"  goondan repl --input  whole     {show('repl/0')}  CPU {show('repl/2')}"
        f"  ratio {repl / floor:.1f}x, CPU "
        f"{values['repl/2'] / values['floor/2']:.1f}x (goal <= {RATIO_GOAL:.0f}x)"
    )
    print(f"  goondan repl --input  1st req.  {show('repl/1')}")
    cold = values["repl-cold/0"]
    print(f"  repl, cold cache      whole     {show('repl-cold/0')}  CPU {show('repl-cold/2')}"
          f"  ratio {cold / floor:.1f}x  1st req. {values['repl-cold/1']:.1f} ms")
    run_first = values["run/1"]
    print(f"  goondan run --input   whole     {show('run/0')}  CPU {show('run/2')}")
    print(
        f"  goondan run --input   1st req.  {show('run/1')}  "
        f"(goal < {RUN_FIRST_REQUEST_GOAL_MS:.0f} ms)"
    )
    ok = repl / floor <= RATIO_GOAL and run_first < RUN_FIRST_REQUEST_GOAL_MS
    print("PASS" if ok else "OVER GOAL")
    return values


if __name__ == "__main__":
    raise SystemExit(main())
