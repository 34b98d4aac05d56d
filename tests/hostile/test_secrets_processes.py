"""Issue 27 item 6, secrets past the mask: every process masks every secret of the bundle.

Repros: a process registered only the secrets it resolved itself, so a tool of agent ``main``
printed the key of another agent's Model (in its environment from the same ``.env``) unmasked
into the conversation; ``repl --input`` printed a key in the model's reply raw; ``inspect``
run from outside the bundle directory masked nothing once the swarm had stopped.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.hostile import run_cli
from tests.support.mcp_servers import SERVER, require_sdk

MAIN_KEY = "sk-main-model-key-0123456789abcdef"
OTHER_KEY = "sk-other-model-key-9876543210fedcba"

BUNDLE = f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: leaky
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: scripted
spec:
  provider: scripted
  model: fake
  apiKey: {{valueFrom: {{env: MAIN_MODEL_KEY}}}}
  options:
    script:
      - toolCalls: [{{name: bash__exec, args: {{command: 'echo "other=$OTHER_MODEL_KEY"'}}}}]
      - text: "done; my own key is {MAIN_KEY}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: other
spec:
  provider: openai
  model: gpt-test
  endpoint: http://127.0.0.1:9/v1
  apiKey: {{valueFrom: {{env: OTHER_MODEL_KEY}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: main
spec:
  modelConfig:
    modelRef: Model/scripted
  prompts:
    systemPrompt: Be brief.
  workdir: ./work
  tools:
    - ref: {{kind: Tool, name: bash, package: "@goondan/base"}}
      config: {{passEnv: [OTHER_MODEL_KEY]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: helper
spec:
  modelConfig:
    modelRef: Model/other
  prompts:
    systemPrompt: Be brief.
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: main
  agents: [main, helper]
  instanceKey: leaky
"""


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "work").mkdir(parents=True)
    (bundle / "goondan.yaml").write_text(BUNDLE, encoding="utf-8")
    (bundle / ".env").write_text(
        f"MAIN_MODEL_KEY={MAIN_KEY}\nOTHER_MODEL_KEY={OTHER_KEY}\n", encoding="utf-8"
    )
    return bundle


def _mcp_bundle(tmp_path: Path) -> Path:
    """The same swarm, but ``main`` reads the other Model's key with an MCP ``get-env`` tool
    (an MCP server inherits the agent process's environment)."""
    bundle = _bundle(tmp_path)
    text = (bundle / "goondan.yaml").read_text(encoding="utf-8")
    text = text.replace(
        "[{name: bash__exec, args: {command: 'echo \"other=$OTHER_MODEL_KEY\"'}}]",
        "[{name: probe__get-env, args: {name: OTHER_MODEL_KEY}}]")
    text = text.replace(
        '    - ref: {kind: Tool, name: bash, package: "@goondan/base"}\n'
        "      config: {passEnv: [OTHER_MODEL_KEY]}\n", "    - Tool/probe\n")
    text += ("---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: probe}\nspec:\n"
             f"  mcp:\n    command: [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]\n"
             "    timeoutMs: 30000\n  exports: [get-env]\n")
    (bundle / "goondan.yaml").write_text(text, encoding="utf-8")
    return bundle


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MAIN_MODEL_KEY", "OTHER_MODEL_KEY")}


def _stored(state_root: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in state_root.rglob("*.jsonl"))


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["repl", "run"])
def test_another_models_key_and_a_key_in_the_reply_are_masked(
    tmp_path: Path, state_root: Path, command: str
) -> None:
    bundle = _bundle(tmp_path)
    result = run_cli(command, "-b", str(bundle), "--input", "go", env=_env())
    out = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    assert result.returncode == 0, out
    assert "done; my own key is ***" in result.stdout.decode()
    assert MAIN_KEY not in out and OTHER_KEY not in out
    stored = _stored(state_root)
    assert "other=***" in stored
    assert OTHER_KEY not in stored


@pytest.mark.e2e
def test_an_mcp_tool_in_one_agent_cannot_show_another_models_key(
    tmp_path: Path, state_root: Path
) -> None:
    require_sdk()
    bundle = _mcp_bundle(tmp_path)
    result = run_cli("run", "-b", str(bundle), "--input", "go", env=_env())
    out = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    assert result.returncode == 0, out
    stored = _stored(state_root)
    assert '"probe__get-env"' in stored and OTHER_KEY not in stored
    assert "***" in stored and OTHER_KEY not in out


@pytest.mark.e2e
def test_inspect_from_another_directory_masks_the_recorded_secrets(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = _bundle(tmp_path)
    first = run_cli(
        "repl", "-b", str(bundle), "--input", f"remember {OTHER_KEY} and {MAIN_KEY}", env=_env()
    )
    assert first.returncode == 0, first.stderr.decode(errors="replace")
    assert OTHER_KEY in _stored(state_root)  # the user's own message is stored as typed
    record = next(state_root.glob("workspaces/*/workspace.json"))
    assert json.loads(record.read_text(encoding="utf-8")) == {
        "bundleRoot": str(bundle.resolve()), "secretEnv": ["MAIN_MODEL_KEY", "OTHER_MODEL_KEY"]}
    assert MAIN_KEY not in record.read_text(encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["inspect", "instance", "leaky"], ["inspect", "instance", "leaky", "--raw"],
                 ["inspect", "workspace"]):
        result = run_cli(*args, env=_env(), cwd=elsewhere)
        shown = result.stdout.decode(errors="replace")
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        assert OTHER_KEY not in shown and MAIN_KEY not in shown
    shown = run_cli("inspect", "instance", "leaky", env=_env(), cwd=elsewhere).stdout.decode()
    assert "remember *** and ***" in shown


def test_the_bundles_secrets_are_every_key_secret_and_header_but_no_setting() -> None:
    from types import SimpleNamespace

    from goondan.config.secretsources import register_bundle_secrets, secret_env_names
    from goondan.secrets import is_secret

    def res(kind: str, spec: dict[str, object]) -> SimpleNamespace:
        return SimpleNamespace(kind=kind, spec=spec)

    env_ref = {"valueFrom": {"env": "SRC_TOKEN"}}
    bundle = SimpleNamespace(
        resources=[
            res("Model", {"provider": "anthropic"}),
            res("Model", {"provider": "openai", "apiKey": {"valueFrom": {"env": "SRC_OPENAI"}}}),
            res(
                "Connection",
                {
                    "secrets": {"BOT_TOKEN": {"valueFrom": {"secretRef": {"ref": "Secret/bot"}}}},
                    "config": {"PORT": {"valueFrom": {"env": "SRC_PORT"}}},
                    "verify": {"webhook": {"signingSecret": {"value": "literal-signing-secret"}}},
                },
            ),
            res(
                "Tool",
                {
                    "mcp": {
                        "env": {"LEVEL": {"value": "verbose-level"}, "TOKEN": env_ref},
                        "headers": {"Authorization": {"value": "Bearer literal-header-token"}},
                    }
                },
            ),
        ]
    )
    env = {"ANTHROPIC_API_KEY": "sk-ant-default-variable-key", "SRC_OPENAI": "sk-openai-named-key",
           "GOONDAN_SECRET_BOT_BOT_TOKEN": "bot-token-from-secret-ref", "SRC_PORT": "18080",
           "SRC_TOKEN": "mcp-env-token-value"}
    assert register_bundle_secrets(bundle, env) == 6
    for value in ("sk-ant-default-variable-key", "sk-openai-named-key", "bot-token-from-secret-ref",
                  "literal-signing-secret", "mcp-env-token-value", "Bearer literal-header-token"):
        assert is_secret(value), value
    assert not is_secret("18080") and not is_secret("verbose-level")
    names = secret_env_names(bundle)
    assert names[:2] == ["ANTHROPIC_API_KEY", "SRC_OPENAI"]
    assert (
        "GOONDAN_SECRET_BOT_BOT_TOKEN" in names and "SRC_TOKEN" in names and "SRC_PORT" not in names
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_send_masks_a_key_in_the_answer_of_a_running_swarm(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = _bundle(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    started = run_cli("run", "--detach", "-b", str(bundle), env=_env(), cwd=elsewhere)
    assert started.returncode == 0, started.stderr.decode(errors="replace")
    try:
        for args in (
            ["send", "-b", str(bundle), "go"],
            ["send", "-b", str(bundle), "-k", "other", "--json", "go"],
        ):
            answer = run_cli(*args, env=_env(), cwd=elsewhere)
            shown = answer.stdout.decode(errors="replace") + answer.stderr.decode(errors="replace")
            assert answer.returncode == 0, shown
            assert "done; my own key is ***" in shown and MAIN_KEY not in shown
    finally:
        stopped = run_cli("stop", "-b", str(bundle), env=_env(), cwd=elsewhere)
    assert stopped.returncode == 0, stopped.stderr.decode(errors="replace")
