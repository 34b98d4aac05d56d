"""One provider table (goondan/config/providers.py) for validation, adapters, doctor and docs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from goondan.commands.doctor import run_checks
from goondan.config import validate_bundle
from goondan.config.providers import (
    BUILTIN_PROVIDERS,
    PROVIDER_NAMES,
    Provider,
    canonical_provider,
    key_variables,
)
from goondan.config.resources import PROVIDERS as VALIDATED
from goondan.llm.base import ModelSpec
from goondan.llm.google import GoogleModel
from goondan.llm.registry import create_model
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.runtime_harness import BASIC

SCRIPTED = "  provider: scripted\n  model: fake\n  options:\n    script: [\"unused\"]\n"


def test_config_and_the_registry_read_the_same_names() -> None:
    assert VALIDATED == PROVIDER_NAMES
    for name in PROVIDER_NAMES:
        spec = ModelSpec(provider=name, model="m", endpoint="http://127.0.0.1:9/v1",
                         options={"script": ["x"]} if name == "scripted" else {})
        assert create_model(spec) is not None  # every validated name builds an adapter
    assert canonical_provider(" Gemini ") == "google" and canonical_provider("nope") is None


def test_provider_gemini_validates_and_runs_like_google(
    tmp_path: Path, state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider() as fake:
        bundle = tmp_path / "bundle"
        shutil.copytree(BASIC, bundle, ignore=shutil.ignore_patterns("__pycache__"))
        manifest = bundle / "goondan.yaml"
        text = manifest.read_text(encoding="utf-8")
        assert SCRIPTED in text
        manifest.write_text(text.replace(SCRIPTED, (
            f"  provider: gemini\n  model: gemini-test\n  endpoint: {fake.base_url('google')}\n"
            "  apiKey: {valueFrom: {env: GOONDAN_GEMINI_TEST_KEY}}\n"
        )), encoding="utf-8")
        monkeypatch.setenv("GOONDAN_GEMINI_TEST_KEY", "gemini-test-key")
        report = validate_bundle(manifest)
        assert report.valid, [d.message for d in report.errors]
        fake.enqueue(FakeReply.reply("hello from gemini"))

        async def main() -> Any:
            async with Runtime.from_bundle(bundle, state_root=state_root) as rt:
                instance = await rt.instance("plain")
                assert isinstance(instance.model, GoogleModel)
                return await rt.run_turn("plain", "hi")

        assert run(main()).text == "hello from gemini"
        assert ":streamGenerateContent" in fake.requests[0].path


def _doc_row(row: Provider) -> str:
    """The row of docs/models.md's provider table that ``row`` should have."""
    names = " / ".join(f"`{n}`" for n in row.names)
    endpoint = f"`{row.endpoint}`" if row.endpoint else (
        "none: `spec.endpoint` required" if row.endpoint_required else "none")
    keys = ", then ".join(f"`{v}`" for v in row.key_env) or "none"
    base = f"`{row.base_url_env}`" if row.base_url_env else "none"
    return f"| {names} | {endpoint} | {keys} | {base} |"


def test_the_models_doc_shows_the_provider_table() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text(encoding="utf-8")
    header = "| provider | default endpoint | key variables tried"
    assert header in text
    lines = text[text.index(header):].splitlines()[2:]
    documented = lines[:lines.index("")]
    assert documented == [_doc_row(row) for row in BUILTIN_PROVIDERS]


def test_doctor_without_a_bundle_checks_every_key_variable_of_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in key_variables():
        monkeypatch.delenv(variable, raising=False)
    checks = run_checks(tmp_path / "none", tmp_path / "state")
    missing = next(c for c in checks if c.category == "API keys")
    assert missing.status == "warn" and all(
        v in (missing.suggestion or "") for v in key_variables()
    )
    monkeypatch.setenv("GOOGLE_GENERATIVE_AI_API_KEY", "AIza-doctor-test-key")
    checks = run_checks(tmp_path / "none", tmp_path / "state")
    assert [c.name for c in checks if c.category == "API keys"] == ["GOOGLE_GENERATIVE_AI_API_KEY"]
