"""Before/after benchmark: turn overhead and cold start of two source trees, side by side.

The figures are those of ``scripts/bench_turn.py`` (the K=0 turn at 100 and 10,000 stored
messages, the 20-step turn; instant model, state root on tmpfs) and ``scripts/bench_cold.py``
(``python -c pass``, ``goondan repl --input`` with a warm and a cold bundle cache, ``goondan
run --input`` to its first model request), measured with those scripts' own functions. The two
trees alternate round by round (the order flips each round), so load from other processes hits
both alike; each figure is the median over all rounds, and the table gives after / before.

* turn overhead: each round runs, per tree, a child process with that tree first on the path
  and that tree's ``bench_turn.measure`` (``--turns`` K=0 turns per size); the round's figure is
  the child's median.
* cold start: each round times, per tree, every command once with ``PYTHONPATH`` set to that
  tree (the agent processes inherit it), against one fake provider; each tree has its own
  state root and bundle cache.

Run: ``git worktree add --detach /tmp/before e2d9217`` and then
``.venv/bin/python scripts/bench_compare.py /tmp/before [AFTER] [--rounds N] [--turns N]``
(AFTER defaults to this checkout; about a minute per round on an idle machine).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_cold import timed  # noqa: E402
from tests.support.fake_provider import FakeProvider  # noqa: E402
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle, goondan_cmd  # noqa: E402

# Run in a child with the tree's path first: that tree's bench_turn.measure, fewer turns.
TURN_CHILD = """
import asyncio, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/scripts")
import bench_turn
bench_turn.TURNS, bench_turn.LONG_TURNS = int(sys.argv[2]), max(1, int(sys.argv[2]) // 3)
with tempfile.TemporaryDirectory(dir=bench_turn.fast_dir()) as tmp:
    print(json.dumps(asyncio.run(bench_turn.measure(Path(tmp)))))
"""
TURN_ROWS = (("small", "K=0 turn, 100 messages"), ("large", "K=0 turn, 10,000 messages"),
             ("twenty", "20-step turn, 100 messages"))
# (command, column of bench_cold.timed: 0 whole process, 1 first model request, 2 CPU, label)
COLD_ROWS = (("floor", 0, "python -c pass, wall"), ("floor", 2, "python -c pass, CPU"),
             ("repl", 0, "repl --input, wall"), ("repl", 2, "repl --input, CPU"),
             ("repl", 1, "repl --input, 1st request"), ("repl-cold", 0, "repl, cold cache, wall"),
             ("repl-cold", 2, "repl, cold cache, CPU"), ("run", 0, "run --input, wall"),
             ("run", 2, "run --input, CPU"), ("run", 1, "run --input, 1st request"))


def check_tree(tree: Path, env: dict[str, str]) -> None:
    """A child with ``env`` (run in the current directory) imports goondan from ``tree``."""
    done = subprocess.run([sys.executable, "-c", "import goondan; print(goondan.__file__)"],
                          env=env, check=True, capture_output=True, text=True)
    if not Path(done.stdout.strip()).is_relative_to(tree):
        raise SystemExit(f"PYTHONPATH={tree} imports goondan from {done.stdout.strip()}")


def turn_figures(tree: Path, turns: int) -> dict[str, list[float]]:
    """One child's medians: {size: [wall ms, CPU ms]}."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", TURN_CHILD, str(tree), str(turns)], env=env,
                          check=False, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"turn benchmark of {tree} failed:\n{done.stderr[-2000:]}")
    figures: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path, nargs="?", default=None)
    parser.add_argument("after", type=Path, nargs="?", default=ROOT)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--turns", type=int, default=60, help="K=0 turns per size in each child")
    args = parser.parse_args()
    if args.before is None:  # `make bench` runs every script without arguments
        print("give the tree to compare with, e.g. `git worktree add --detach /tmp/before "
              "e2d9217` and then: python " + " ".join(sys.argv[:1]) + " /tmp/before")
        return 0
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for tree in trees.values():  # as bench_cold.py: a user's install has its bytecode compiled
        compileall.compile_dir(str(tree / "goondan"), quiet=2)
    turn: dict[str, dict[str, list[list[float]]]] = {
        label: {name: [] for name, _ in TURN_ROWS} for label in trees}
    cold: dict[str, dict[str, list[tuple[float, float, float]]]] = {
        label: {"floor": [], "repl": [], "repl-cold": [], "run": []} for label in trees}
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp, FakeProvider() as fake:
        # `python -m` and `-c` put the current directory first on the path: leave this checkout.
        os.chdir(tmp)
        bundle = fake_provider_bundle(Path(tmp), fake.base_url("openai"))
        envs = {}
        for label, tree in trees.items():
            env = {
                **os.environ,
                FAKE_KEY_ENV: "sk-bench-compare",
                "PYTHONPATH": str(tree),
                "GOONDAN_STATE_ROOT": f"{tmp}/state-{label}",
                "GOONDAN_CACHE_DIR": f"{tmp}/cache-{label}",
            }
            for key in ("PYTHONDONTWRITEBYTECODE", "GOONDAN_NO_CACHE"):
                env.pop(key, None)
            envs[label] = env
            check_tree(tree, env)
            # One untimed start writes the bundle cache entry the warm starts reuse.
            timed(
                goondan_cmd(
                    "repl", "--bundle", str(bundle), "--instance", "warmup", "--input", "hi"
                ),
                env,
                fake,
            )
        for index in range(args.rounds):
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            for label in order:
                for name, values in turn_figures(trees[label], args.turns).items():
                    if name in turn[label]:  # a newer tree may report more (journal on/off)
                        turn[label][name].append(values)
            for label in order:
                env, rows, tag = envs[label], cold[label], f"{label}{index}"
                rows["floor"].append(timed([sys.executable, "-c", "pass"], env, None))
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
                        env,
                        fake,
                    )
                )
                cold_env = {**env, "GOONDAN_CACHE_DIR": f"{tmp}/cold-cache-{tag}"}
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
                        env,
                        fake,
                    )
                )
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        os.chdir(ROOT)  # before the temporary directory goes

    print(
        f"before: {trees['before']}\nafter:  {trees['after']}\n"
        f"medians of {args.rounds} interleaved rounds; "
        "ms; after/before (> 1.05: more than 5 % worse)"
    )
    print(f"  {'figure':<38} {'before':>9} {'after':>9} {'ratio':>7}")

    def row(label: str, before: float, after: float) -> None:
        print(f"  {label:<38} {before:9.3f} {after:9.3f} {after / before:7.3f}")

    for name, label in TURN_ROWS:
        for column, kind in ((0, "wall"), (1, "CPU")):
            medians = [statistics.median(r[column] for r in turn[tree][name]) for tree in trees]
            row(f"{label}, {kind}", *medians)
    for name, column, label in COLD_ROWS:
        row(label, *(statistics.median(r[column] for r in cold[tree][name]) for tree in trees))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
