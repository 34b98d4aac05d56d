"""Benchmarks for bundle validation (issue 2).

* validate a generated bundle of 1,000 resources (target < 1 s);
* ``goondan validate examples/showcase`` as a whole process, median of 20 runs (target < 150 ms);
* a "billion laughs" YAML document: time and peak memory (target: well under 1 s, small memory).

Run: ``.venv/bin/python scripts/bench_validate.py``. Prints one line per operation with the
ratio to its target (< 1.00 is within target).

``--entry-cache`` instead compares the validation's CPU time with and without the parsed-entry
cache of ``goondan/config/entries.py`` (medians of 7 alternating runs, cache emptied before each).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goondan.config import validate_bundle  # noqa: E402

HEADER = "apiVersion: goondan.ai/v1\n"


def generate(root: Path, total: int = 1000) -> int:
    """Write a valid bundle with ``total`` resources spread over files of ≤ 100 documents."""
    models, tools, extensions, swarms = 10, 300, 50, 1
    agents = total - 1 - models - tools - extensions - swarms
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "t.py").write_text("handlers = {'run': print, 'stop': print}\n")
    (root / "ext.py").write_text("def register(api):\n    pass\n")
    docs = [HEADER + "kind: Package\nmetadata: {name: bench}\nspec: {version: \"1.0.0\"}\n"]
    docs += [
        HEADER + f"kind: Model\nmetadata: {{name: m{i}}}\nspec: {{provider: scripted, model: s}}\n"
        for i in range(models)
    ]
    docs += [
        HEADER + f"kind: Tool\nmetadata:\n  name: t{i}\n  labels: {{group: g{i % 5}}}\nspec:\n"
        "  entry: ./tools/t.py\n  exports:\n    - name: run\n      description: Run it.\n"
        "      parameters:\n        type: object\n        "
        "properties:\n          x: {type: string}\n"
        "        required: [x]\n    - name: stop\n"
        for i in range(tools)
    ]
    docs += [HEADER + f"kind: Extension\nmetadata: {{name: e{i}}}\nspec:\n  entry: ./ext.py\n"
             "  config: {level: info}\n" for i in range(extensions)]
    docs += [
        HEADER + f"kind: Agent\nmetadata: {{name: a{i}}}\nspec:\n  modelConfig:\n"
        f"    modelRef: Model/m{i % models}\n    params: {{temperature: 0.5}}\n"
        f"  prompts: {{systemPrompt: You are agent {i}.}}\n"
        f"  tools:\n    - Tool/t{i % tools}\n    - ref: Tool/t{(i + 1) % tools}\n"
        f"    - selector: {{matchLabels: {{group: g{i % 5}}}}}\n"
        f"  extensions:\n    - ref: Extension/e{i % extensions}\n      config: {{level: debug}}\n"
        for i in range(agents)
    ]
    docs += [HEADER + "kind: Swarm\nmetadata: {name: default}\nspec:\n  entryAgent: a0\n  agents:\n"
             + "".join(f"    - Agent/a{i}\n" for i in range(agents))]
    (root / "goondan.yaml").write_text("---\n".join(docs[:1 + models]))
    rest = docs[1 + models:]
    for n, start in enumerate(range(0, len(rest), 100)):
        part = root / f"part-{n:02d}"
        part.mkdir()
        (part / "resources.yaml").write_text("---\n".join(rest[start:start + 100]))
    return len(docs)


def line(name: str, value: float, unit: str, target: float) -> None:
    print(
        f"{name:<46} {value:9.1f} {unit:<3} target < {target:g} {unit}  ratio {value / target:.2f}"
    )


def bench_generated() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        count = generate(Path(tmp))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            report = validate_bundle(tmp, env={})
            times.append(time.perf_counter() - start)
            assert report.valid, [d.to_dict() for d in report.errors[:3]]
        line(
            f"validate generated bundle ({count} resources)",
            statistics.median(times) * 1000,
            "ms",
            1000,
        )


def bench_process() -> None:
    exe = ROOT / ".venv" / "bin" / "goondan"
    cmd = [str(exe) if exe.exists() else "goondan", "validate", str(ROOT / "examples" / "showcase")]
    # Measure what users get: byte-code caches enabled (CI shells often set
    # PYTHONDONTWRITEBYTECODE).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(cmd, check=True, capture_output=True, env=env)  # warm OS and .pyc caches
    times = []
    for _ in range(20):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - start)
    line("goondan validate examples/showcase (process)", statistics.median(times) * 1000, "ms", 150)


def bench_alias_bomb() -> None:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghi":
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = name
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "goondan.yaml").write_text(text)
        tracemalloc.start()
        start = time.perf_counter()
        report = validate_bundle(tmp, env={})
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert report.errors[0].code == "E_CONFIG_ALIAS_LIMIT"
    line("billion laughs document (time)", elapsed * 1000, "ms", 1000)
    line("billion laughs document (peak memory)", peak / 1024 / 1024, "MiB", 50)


def bench_entry_cache() -> None:
    from goondan.config import entries

    class _NoStore(dict[Any, Any]):
        def __setitem__(self, key: Any, value: Any) -> None:
            pass

    kept = entries._cache
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        for name, root in (
            ("generated bundle", tmp),
            ("examples/showcase", str(ROOT / "examples" / "showcase")),
            ("examples/quickstart", str(ROOT / "examples" / "quickstart")),
        ):
            times: dict[str, list[float]] = {"cache": [], "plain": []}
            for index in range(7):
                for mode in ("cache", "plain") if index % 2 else ("plain", "cache"):
                    kept.clear()
                    entries._cache = kept if mode == "cache" else _NoStore()
                    start = time.process_time()
                    validate_bundle(root, env={})
                    times[mode].append(time.process_time() - start)
            entries._cache = kept
            cached, plain = (statistics.median(times[mode]) * 1000 for mode in ("cache", "plain"))
            print(
                f"validate {name:<20} with the entry cache "
                f"{cached:7.1f} ms CPU, without {plain:7.1f} ms"
                f" ({plain / cached - 1:+.1%})"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--entry-cache"]:
        bench_entry_cache()
        raise SystemExit(0)
    bench_generated()
    bench_process()
    bench_alias_bomb()
