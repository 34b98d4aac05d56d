"""The bundle cache (docs/bundle-cache.md): a hit is the same bundle as a full load, every input
change is a miss, bad locations and entries fall back silently, and no secret is ever stored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goondan.config import load_bundle
from goondan.config import validate as validate_module
from goondan.config.cache import entry_path, load_bundle_cached

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
DELEGATION = ROOT / "examples" / "delegation"


class Counter:
    """Counts full loads (validate_loaded calls) made through the cache."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = validate_module.validate_loaded

        def counting(*args: object, **kwargs: object) -> object:
            self.calls += 1
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(validate_module, "validate_loaded", counting)

    def full(self, bundle: Path, state: Path):  # type: ignore[no-untyped-def]
        """A full load (load_bundle), not counted."""
        calls = self.calls
        try:
            return load_bundle(bundle, state_root=state)
        finally:
            self.calls = calls


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    monkeypatch.delenv("GOONDAN_NO_CACHE", raising=False)
    monkeypatch.delenv("GOONDAN_CACHE_DIR", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield dict(os.environ)


def copy(src: Path, tmp_path: Path) -> Path:
    target = tmp_path / src.name
    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def load(bundle: Path, state: Path, env: dict[str, str]):  # type: ignore[no-untyped-def]
    return load_bundle_cached(bundle, state_root=state, env=env)


def test_a_hit_is_the_bundle_of_a_full_load_without_loading_again(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    bundle, state = copy(QUICKSTART, tmp_path), tmp_path / "state"
    counter = Counter(monkeypatch)
    first = load(bundle, state, env)
    assert counter.calls == 1 and entry_path(bundle, state, env).is_file()
    second = load(bundle, state, env)
    assert counter.calls == 1  # served from the entry
    full = counter.full(bundle, state)
    assert second == full == first
    assert second.swarm_spec() == full.swarm_spec()
    for agent in full.swarm_spec().agents:
        assert second.agent_spec(agent) == full.agent_spec(agent)
    assert second.watched_files() == full.watched_files()


def test_a_bundle_with_packages_hits_and_matches(tmp_path: Path, env: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bundle, state = copy(DELEGATION, tmp_path), tmp_path / "state"
    counter = Counter(monkeypatch)
    load(bundle, state, env)
    hit = load(bundle, state, env)
    assert counter.calls == 1
    assert hit == counter.full(bundle, state)
    assert any(r.package == "@goondan/base" for r in hit.resources)


def _edit(path: Path, extra: str = "\n# edited\n") -> None:
    path.write_text(path.read_text(encoding="utf-8") + extra, encoding="utf-8")


@pytest.mark.parametrize(
    "change",
    [
        "prompt",
        "tool",
        "manifest",
        "env-edit",
        "env-new",
        "env-local-new",
        "new-yaml",
        "version",
        "env-var",
        "lockfile",
    ],
)
def test_every_input_change_is_a_miss(change: str, tmp_path: Path, env: dict[str, str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bundle, state = copy(QUICKSTART, tmp_path), tmp_path / "state"
    (bundle / ".env").write_text("UNRELATED=1\n", encoding="utf-8")
    manifest = bundle / "goondan.yaml"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace(
            "  model: gpt-4o-mini",
            "  model: gpt-4o-mini\n  apiKey: {valueFrom: {env: GOONDAN_CACHE_TEST_KEY}}",
            1,
        ),
        encoding="utf-8",
    )
    env.pop("GOONDAN_CACHE_TEST_KEY", None)
    counter = Counter(monkeypatch)
    load(bundle, state, env)
    load(bundle, state, env)
    assert counter.calls == 1
    if change == "prompt":
        _edit(bundle / "prompts" / "assistant.md", "Answer in French.\n")
    elif change == "tool":
        _edit(bundle / "tools" / "units.py")
    elif change == "manifest":
        _edit(bundle / "goondan.yaml")
    elif change == "env-edit":
        _edit(bundle / ".env", "OTHER=2\n")
    elif change == "env-new":
        (bundle / ".env").unlink()
        load(bundle, state, env)  # a bundle without .env is cached as such ...
        counter.calls = 1
        (bundle / ".env").write_text("X=1\n", encoding="utf-8")  # ... and the new file is a miss
    elif change == "env-local-new":
        (bundle / ".env.local").write_text("X=1\n", encoding="utf-8")
    elif change == "new-yaml":
        (bundle / "more").mkdir()
        (bundle / "more" / "tools.yaml").write_text(
            "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: extra}\n"
            "spec: {entry: ./tools/units.py, exports: [{name: convert}]}\n", encoding="utf-8")
    elif change == "version":
        monkeypatch.setattr(sys.modules["goondan"], "__version__", "99.0.0")
    elif change == "env-var":
        env = {**env, "GOONDAN_CACHE_TEST_KEY": "sk-now-set"}
    elif change == "lockfile":
        (bundle / "goondan.lock.yaml").write_text(
            "lockfileVersion: 1\npackages: {}\n", encoding="utf-8"
        )
    reloaded = load(bundle, state, env)
    assert counter.calls == 2, change
    if change != "env-var":  # load_bundle validates against os.environ
        assert reloaded == counter.full(bundle, state)
    if change == "new-yaml":
        assert reloaded.get("Tool", "extra") is not None
    if change == "env-var":  # the unset-variable warning is gone
        assert not any(w.code == "W_CONFIG_ENV_UNSET" for w in reloaded.warnings)
    if change == "prompt":
        assert "French" in reloaded.agent_spec("assistant").system_prompt
    load(bundle, state, env)
    assert counter.calls == 2  # and the rewritten entry hits again


def test_a_path_dependency_edit_is_a_miss(tmp_path: Path, env: dict[str, str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    dep = tmp_path / "dep"
    (dep / "tools").mkdir(parents=True)
    (dep / "tools" / "t.py").write_text(
        "handlers = {'go': lambda args, ctx: 'ok'}\n", encoding="utf-8"
    )
    (dep / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: "
        "{name: dep}\nspec: {version: 1.0.0}\n---\n"
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: t}\n"
        "spec: {entry: ./tools/t.py, exports: [{name: go}]}\n",
        encoding="utf-8",
    )
    bundle = copy(QUICKSTART, tmp_path)
    manifest = bundle / "goondan.yaml"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace(
            "  description:", "  dependencies:\n    - {name: dep, path: ../dep}\n  description:", 1
        ),
        encoding="utf-8",
    )
    state = tmp_path / "state"
    counter = Counter(monkeypatch)
    load(bundle, state, env)
    assert load(bundle, state, env).get("Tool", "t") is not None and counter.calls == 1
    _edit(dep / "tools" / "t.py")
    load(bundle, state, env)
    assert counter.calls == 2
    (dep / "dist").mkdir()  # a dist/goondan.yaml now takes precedence over goondan.yaml
    shutil.copy(dep / "goondan.yaml", dep / "dist" / "goondan.yaml")
    load(bundle, state, env)
    assert counter.calls == 3


def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path: Path, env: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bundle, state = copy(QUICKSTART, tmp_path), tmp_path / "state"
    load(bundle, state, env)
    entry = entry_path(bundle, state, env)
    good = json.loads(entry.read_text(encoding="utf-8"))
    counter = Counter(monkeypatch)
    broken_shapes = [
        b"\x00not json", b"[]", b"{}",
        json.dumps({**good, "bundle": {"resources": "nope"}}).encode(),
        json.dumps({**good, "inputs": {**good["inputs"], "files": []}}).encode(),
    ]
    for raw in broken_shapes:
        entry.write_bytes(raw)
        assert load(bundle, state, env) == counter.full(bundle, state)
        assert json.loads(entry.read_text(encoding="utf-8"))["bundle"] == good["bundle"]
    assert counter.calls == len(broken_shapes)


def test_an_unusable_cache_location_falls_back_silently(
    tmp_path: Path, env: dict[str, str]
) -> None:
    bundle = copy(QUICKSTART, tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    env = {**env, "GOONDAN_CACHE_DIR": str(blocker / "cache")}  # cannot be created (nor read)
    assert load(bundle, tmp_path / "state", env) == load_bundle(
        bundle, state_root=tmp_path / "state"
    )
    assert load(bundle, tmp_path / "state", env) == load_bundle(
        bundle, state_root=tmp_path / "state"
    )


def test_the_cache_dir_env_and_the_off_switch(tmp_path: Path, env: dict[str, str]) -> None:
    bundle, state = copy(QUICKSTART, tmp_path), tmp_path / "state"
    load(bundle, state, {**env, "GOONDAN_NO_CACHE": "1"})
    assert not (state / "cache").exists()
    custom = {**env, "GOONDAN_CACHE_DIR": str(tmp_path / "elsewhere")}
    load(bundle, state, custom)
    assert entry_path(bundle, state, custom).parent == tmp_path / "elsewhere"
    assert entry_path(bundle, state, custom).is_file() and not (state / "cache").exists()


def test_a_literal_secret_in_yaml_is_never_cached(tmp_path: Path, env: dict[str, str]) -> None:
    bundle, state = copy(QUICKSTART, tmp_path), tmp_path / "state"
    manifest = bundle / "goondan.yaml"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace(
            "  model: gpt-4o-mini",
            "  model: gpt-4o-mini\n  apiKey: {value: sk-literal-in-yaml-123}",
            1,
        ),
        encoding="utf-8",
    )
    loaded = load(bundle, state, env)
    assert any(w.code == "W_CONFIG_INLINE_SECRET" for w in loaded.warnings)
    assert not entry_path(bundle, state, env).exists()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="\"'#\\"),
        min_size=12,
        max_size=40,
    )
)
def test_no_environment_value_reaches_the_cache(
    secret: str, tmp_path: Path, env: dict[str, str]
) -> None:
    case = tmp_path / f"case-{abs(hash(secret))}"
    case.mkdir()
    bundle, state = copy(QUICKSTART, case), case / "state"
    (bundle / ".env").write_text(
        f"OPENAI_API_KEY={secret}\nOTHER_TOKEN={secret}\n", encoding="utf-8"
    )
    load(bundle, state, {**env, "OPENAI_API_KEY": secret, "GOONDAN_FAKE_PROVIDER_KEY": secret})
    raw = entry_path(bundle, state, env).read_bytes()
    assert secret.encode() not in raw
    assert json.dumps(secret).encode()[1:-1] not in raw


def test_repl_on_a_cache_hit_imports_neither_yaml_nor_the_validator(tmp_path: Path) -> None:
    """Pins the import set of a warm ``goondan repl --input`` (docs/runtime.md "Performance")."""
    bundle = copy(QUICKSTART, tmp_path)
    manifest = bundle / "goondan.yaml"  # an inline script: a script file is YAML, read at run time
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(
        "scriptFile: ./demo-script.yaml", 'script: ["hello there"]', 1), encoding="utf-8")
    probe = (
        "import atexit, runpy, sys\n"
        "def report():\n"
        "    heavy = [m for m in ('yaml', 'goondan.config.validate', 'goondan.config.loader',\n"
        "             'goondan.runtime.otlp_exporter', 'fractions') if m in sys.modules]\n"
        "    sys.stderr.write(f'HEAVY {heavy}\\n')\n"
        "atexit.register(report)\n"
        f"sys.argv = ['goondan', 'repl', '--bundle', {str(bundle)!r}, '--input', 'hi']\n"
        "runpy.run_module('goondan', run_name='__main__')\n"
    )
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(tmp_path / "state")}
    for key in ("GOONDAN_NO_CACHE", "GOONDAN_CACHE_DIR", "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "GOONDAN_OTLP_ENDPOINT"):
        env.pop(key, None)
    cold = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert cold.returncode == 0, cold.stderr
    assert "'yaml'" in cold.stderr  # the first start parses and validates
    warm = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert warm.returncode == 0, warm.stderr
    assert "HEAVY []" in warm.stderr, warm.stderr
    assert warm.stdout == cold.stdout


def test_a_file_edited_while_the_bundle_loads_is_a_miss_next_time(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry is keyed on the bytes the load parsed, not on the file as it is afterwards."""
    bundle, state = copy(QUICKSTART, tmp_path), tmp_path / "state"
    manifest = bundle / "goondan.yaml"
    real = validate_module.validate_loaded
    calls = []

    def load_then_edit(*args: object, **kwargs: object) -> object:
        calls.append(1)
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        if len(calls) == 1:  # an editor saves between the parse and the cache write
            _edit(manifest, "\n---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: late}\n"
                  "spec: {entry: ./tools/units.py, exports: [{name: convert}]}\n")
        return result

    monkeypatch.setattr(validate_module, "validate_loaded", load_then_edit)
    assert load(bundle, state, env).get("Tool", "late") is None
    assert load(bundle, state, env).get("Tool", "late") is not None
    assert len(calls) == 2
