"""Instructions per turn of two source trees, counted by valgrind: a figure that machine load
does not move.

``bench_compare.py`` times both trees (CPU and wall) round by round; on a machine shared with
other jobs its CPU ratios move by ±7 % (``python -c pass`` alone). Here each tree runs the same
turns under ``valgrind --tool=callgrind`` twice — with ``FEW`` and with ``MANY`` measured turns —
and the difference of the two totals over ``MANY - FEW`` is the instructions of one turn
(start-up and warm-up cancel out). Instruction counts do not include the kernel's work
(syscalls, page faults, thread switches): they measure the Python code a turn runs.

Figures: the K=0 turn and the 20-step turn of ``bench_turn.py`` (instant model, 100 stored
messages, state root on tmpfs). Needs ``valgrind`` (Debian's package); a minute or two per tree.

Run: ``git worktree add --detach /tmp/before e2d9217`` and then
``.venv/bin/python scripts/bench_instructions.py /tmp/before [AFTER]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FEW, MANY = 5, 25

# One child: warm-up turns, then ``count`` measured turns of ``steps`` steps.
CHILD = """
import asyncio, sys, tempfile
from pathlib import Path
tree, steps, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path[:0] = [tree, tree + "/scripts"]
import bench_turn
from goondan.runtime import Runtime

async def main(root):
    model, transport = bench_turn.instant_openai()
    async with Runtime.from_bundle(bench_turn.bundle(root), state_root=root,
                                   models={"plain": model}) as rt:
        instance = await rt.instance("plain", "bench")
        await instance.apply_message_events(bench_turn.history(100))
        for _ in range(5 + count):
            transport.plan = [bench_turn._tool(s) for s in range(steps - 1)]
            await instance.run("hi", stream=False)

with tempfile.TemporaryDirectory(dir=bench_turn.fast_dir()) as tmp:
    asyncio.run(main(Path(tmp)))
"""


def instructions(tree: Path, steps: int, count: int) -> int:
    """Total instructions of a child running ``count`` measured turns (callgrind's summary)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, "-c", CHILD, str(tree), str(steps), str(count)],
                       env=env, check=True, capture_output=True, cwd=tmp)
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"no instruction total in callgrind's output for {tree}")


def per_turn(tree: Path, steps: int) -> float:
    return (instructions(tree, steps, MANY) - instructions(tree, steps, FEW)) / (MANY - FEW)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, nargs="?", default=None)
    parser.add_argument("after", type=Path, nargs="?", default=ROOT)
    args = parser.parse_args()
    if args.before is None:  # `make bench` runs every script without arguments
        print("give the tree to compare with, e.g. `git worktree add --detach /tmp/before "
              "e2d9217` and then: python " + " ".join(sys.argv[:1]) + " /tmp/before")
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 0
    trees = (args.before.resolve(), args.after.resolve())
    print(f"before: {trees[0]}\nafter:  {trees[1]}\n"
          "instructions per turn (callgrind; turns of bench_turn.py, 100 stored messages)")
    print(f"  {'turn':<22} {'before':>12} {'after':>12} {'ratio':>7}")
    for label, steps in (("K=0 turn", 1), ("20-step turn", 20)):
        before, after = (per_turn(tree, steps) for tree in trees)
        print(f"  {label:<22} {before:12,.0f} {after:12,.0f} {after / before:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
