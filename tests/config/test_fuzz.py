"""Fuzzing: random documents and random mutations of the showcase never crash validation."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goondan.config import validate_bundle

SHOWCASE = Path(__file__).resolve().parents[2] / "examples" / "showcase"
WORDS = [
    "apiVersion", "kind", "metadata", "name", "labels", "spec", "provider", "model", "apiKey",
    "value", "valueFrom", "env", "secretRef", "ref", "entry", "exports", "parameters", "type",
    "modelConfig", "modelRef", "params", "prompts", "systemPrompt", "systemRef", "tools",
    "extensions", "requiredTools", "entryAgent", "agents", "policy", "maxStepsPerTurn",
    "selector", "matchLabels", "overrides", "connectorRef", "swarmRef", "ingress", "rules",
    "match", "event", "route", "agentRef", "events", "dependencies", "path", "version", "x-note",
    "Model", "Agent", "Swarm", "Tool", "Extension", "Connector", "Connection", "Package",
    "goondan.ai/v1", "Model/scripted", "Tool/units", "Agent/assistant", "./tools/units.py",
    "../escape.py", "/etc/passwd", "__", "a__b",
]
DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
SETTINGS = settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
    st.sampled_from(WORDS), st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)), inner, max_size=5),
    ),
    max_leaves=25,
)
document = st.fixed_dictionaries(
    {"apiVersion": st.sampled_from(["goondan.ai/v1", "v2"]),
     "kind": st.sampled_from(["Model", "Agent", "Swarm", "Tool", "Extension", "Connector",
                              "Connection", "Package", "Nope"])},
    optional={"metadata": values, "spec": values},
)


def _check(bundle: Path) -> None:
    report = validate_bundle(bundle, env={})
    json.dumps(report.to_dict())
    for diag in report.errors + report.warnings:
        assert diag.code.startswith(("E_", "W_")) and diag.message
    if report.bundle is not None:  # a valid bundle's specs must also build
        for agent in report.bundle.of_kind("Agent"):
            report.bundle.agent_spec(agent.name) if agent.package is None else None


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One directory reused by every example (creating one per example dominates the runtime)."""
    root = tmp_path_factory.mktemp("fuzz")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@SETTINGS
@given(docs=st.lists(st.one_of(document, values), min_size=1, max_size=4),
       raw=st.one_of(st.none(), st.text(max_size=80)))
def test_random_documents(scratch: Path, docs: list[Any], raw: str | None) -> None:
    root = scratch / "random"
    root.mkdir(exist_ok=True)
    text = yaml.dump_all(docs, Dumper=DUMPER, sort_keys=False) if raw is None else raw
    (root / "goondan.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
    _check(root)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(_paths(item, (*prefix, i)))
    return out


def _mutate(docs: list[Any], data: st.DataObject) -> list[Any]:
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(docs) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent: Any = docs
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        action = data.draw(st.sampled_from(["delete", "replace", "add-key", "dup-item"]))
        if action == "delete":
            del parent[last]
        elif action == "replace":
            parent[last] = data.draw(values)
        elif action == "add-key" and isinstance(parent[last], dict):
            parent[last][data.draw(st.sampled_from(WORDS))] = data.draw(values)
        elif action == "dup-item" and isinstance(parent[last], list) and parent[last]:
            parent[last].append(parent[last][0])
    return docs


ORIGINALS = {
    name: list(yaml.safe_load_all((SHOWCASE / name).read_text()))
    for name in ("goondan.yaml", "tools.yaml", "connectors.yaml")
}


@SETTINGS
@given(data=st.data())
def test_mutations_of_the_showcase(scratch: Path, data: st.DataObject) -> None:
    root = scratch / "showcase"
    if not root.exists():
        shutil.copytree(SHOWCASE, root)
    target = data.draw(st.sampled_from(sorted(ORIGINALS)))
    docs = _mutate(copy.deepcopy(ORIGINALS[target]), data)
    try:
        (root / target).write_text(yaml.dump_all(docs, Dumper=DUMPER, sort_keys=False))
        _check(root)
    finally:
        shutil.copyfile(SHOWCASE / target, root / target)
