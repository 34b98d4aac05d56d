"""Hostile input, item 3: secrets never reach a tool result, ``inspect``, ``logs`` or ``validate``.

Repros: ``bash__exec`` of ``echo $KEY`` stored and showed the Model's API key; ``goondan
inspect`` masked nothing (it never registered the bundle's secrets); the ``W_CONFIG_INLINE_SECRET``
excerpt of ``validate`` printed the literal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from goondan.runtime import Runtime
from goondan.secrets import register_secret
from goondan.tools import ToolContext, load_entry_module
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.hostile import run_cli, write_bundle

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
bash = load_entry_module(TOOLS / "bash.py").handlers
KEY_ENV = "HOSTILE_PROVIDER_KEY"
KEY = "sk-hostile-provider-key-0123456789"

OPENAI_MODEL = """  provider: scripted
  model: fake
  options:
    loop: true
    script: [{text: "ok"}]
"""


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def _openai_bundle(tmp_path: Path, endpoint: str, tool_config: str = "") -> Path:
    bundle = write_bundle(
        tmp_path,
        tools='    - ref: {kind: Tool, name: bash, package: "@goondan/base"}\n' + tool_config,
    )
    manifest = bundle / "goondan.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert OPENAI_MODEL in text
    manifest.write_text(text.replace(OPENAI_MODEL, (
        f"  provider: openai\n  model: gpt-test\n  endpoint: {endpoint}\n"
        f"  apiKey: {{valueFrom: {{env: {KEY_ENV}}}}}\n")), encoding="utf-8")
    return bundle


def test_tools_do_not_inherit_the_provider_key_and_outputs_are_masked(
    tmp_path: Path, state_root: Path, fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    # passEnv names it exactly: the key reaches the command, but never the stored result.
    bundle = _openai_bundle(tmp_path, fake_provider.base_url("openai"),
                            f"      config: {{passEnv: [{KEY_ENV}]}}\n")
    echo = FakeToolCall("bash__exec", {"command": f'echo "key=${KEY_ENV}"; env'})
    fake_provider.enqueue(FakeReply.calls(echo), FakeReply.reply("done"))

    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, stream=False) as rt:
            assert (await rt.run_turn("main", "show the key")).text == "done"

    run(main())
    stored = next(state_root.rglob("base.jsonl")).read_text(encoding="utf-8")
    assert "key=***" in stored and KEY not in stored
    tool_message = next(
        m for m in fake_provider.requests[1].json["messages"] if m["role"] == "tool"
    )
    assert "key=***" in tool_message["content"] and KEY not in tool_message["content"]


def test_bash_children_get_only_allow_listed_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTILE_OPENAI_API_KEY", "sk-not-for-tools-123456")
    monkeypatch.setenv("HOSTILE_PLAIN", "plain")
    monkeypatch.setenv("HOSTILE_SECRET_BY_GLOB", "sk-glob-secret-123456")
    register_secret("sk-glob-secret-123456")

    def env_of(**config: object) -> str:
        ctx = ToolContext("a", "k", "t", "0" * 32, "c", None, tmp_path, config=config)
        out = run(bash["exec"](ctx, {"command": "env"}))
        return str(out["stdout"])

    default = env_of()
    assert "HOSTILE_" not in default and "PATH=" in default
    widened = env_of(passEnv=["HOSTILE_*"], env={"FIXED": "1"})
    assert "HOSTILE_PLAIN=plain" in widened and "HOSTILE_OPENAI_API_KEY=" in widened
    assert "FIXED=1" in widened
    # A registered secret is not passed by a pattern, only when named exactly.
    assert "HOSTILE_SECRET_BY_GLOB" not in widened
    assert "HOSTILE_SECRET_BY_GLOB=" in env_of(passEnv=["HOSTILE_SECRET_BY_GLOB"])


@pytest.mark.e2e
def test_inspect_and_logs_mask_the_bundles_secrets(tmp_path: Path, state_root: Path) -> None:
    """A fresh ``inspect``/``logs`` process registers the secrets of the bundle it finds."""
    bundle = write_bundle(tmp_path)
    manifest = bundle / "goondan.yaml"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace(
            "  provider: scripted\n",
            f"  provider: scripted\n  apiKey: {{valueFrom: {{env: {KEY_ENV}}}}}\n",
        ),
        encoding="utf-8",
    )
    (bundle / ".env").write_text(f"{KEY_ENV}={KEY}\n", encoding="utf-8")
    first = run_cli("repl", "-b", str(bundle), "--input", f"my key is {KEY}")
    assert first.returncode == 0, first.stderr.decode(errors="replace")
    assert KEY in next(state_root.rglob("base.jsonl")).read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    for args in (["inspect", "instance", "hostile"], ["inspect", "instance", "hostile", "--json"],
                 ["inspect", "instance", "hostile", "--raw"]):
        result = run_cli(*args, env=env, cwd=bundle)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        assert KEY not in result.stdout.decode() and "my key is ***" in result.stdout.decode()
    log_dir = state_root / "runtime" / "logs" / "hostile"
    log_dir.mkdir(parents=True)
    (log_dir / "main.stdout.log").write_text(f"tool printed {KEY}\n", encoding="utf-8")
    result = run_cli("logs", "-i", "hostile", "-p", "main", env=env, cwd=bundle)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert KEY not in result.stdout.decode() and "tool printed ***" in result.stdout.decode()


@pytest.mark.e2e
@pytest.mark.parametrize("literal", ["abc", "sk-inline-literal-0123456789"])
def test_validate_excerpt_of_an_inline_secret_is_masked(tmp_path: Path, literal: str) -> None:
    bundle = write_bundle(tmp_path)
    manifest = bundle / "goondan.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(
        "  provider: scripted\n", f"  provider: scripted\n  apiKey: {{value: {literal}}}\n"),
        encoding="utf-8")
    result = run_cli("validate", str(bundle))
    output = result.stdout.decode() + result.stderr.decode()
    assert "W_CONFIG_INLINE_SECRET" in output
    assert literal not in output and "apiKey: {value: ***}" in output
