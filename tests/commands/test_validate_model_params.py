"""Issue 32 item 8: a typo in ``modelConfig.params`` is reported with a did-you-mean from the
provider's known parameters (goondan/config/providers.py); ``--strict`` makes it an error;
unknown keys that look like no known one still pass on purpose. Through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: params}
spec: {version: "0.1.0"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: PROVIDER, model: some-model}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig:
    modelRef: Model/m
    params: PARAMS
  prompts: {systemPrompt: Help.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/helper, agents: [Agent/helper]}
"""


def validate(
    tmp_path: Path, provider: str, params: str, *args: str
) -> subprocess.CompletedProcess[str]:
    root = tmp_path / provider
    root.mkdir(exist_ok=True)
    (root / "goondan.yaml").write_text(
        BUNDLE.replace("PROVIDER", provider).replace("PARAMS", params), encoding="utf-8"
    )
    return subprocess.run([sys.executable, "-m", "goondan", "validate", str(root), "--json", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def _params_warnings(done: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    report = json.loads(done.stdout)
    return [
        d for d in report["warnings"] + report["errors"] if d["code"] == "W_CONFIG_UNKNOWN_PARAM"
    ]


@pytest.mark.parametrize(("provider", "typo", "meant"), [
    ("anthropic", "temprature", "temperature"),
    ("anthropic", "max_token", "max_tokens"),
    ("openai", "presense_penalty", "presence_penalty"),
    ("google", "maxOutputToken", "maxOutputTokens"),
])
def test_a_params_typo_is_a_warning_with_did_you_mean_and_an_error_with_strict(
        tmp_path: Path, provider: str, typo: str, meant: str) -> None:
    done = validate(tmp_path, provider, f"{{{typo}: 1}}")
    assert done.returncode == 0, done.stdout  # a warning: still valid
    (warning,) = _params_warnings(done)
    assert typo in warning["message"] and f"did you mean {meant!r}" in warning["suggestion"]
    assert warning["field"] == f"spec.modelConfig.params.{typo}"
    strict = validate(tmp_path, provider, f"{{{typo}: 1}}", "--strict")
    assert strict.returncode == 4 and _params_warnings(strict)


@pytest.mark.parametrize(("provider", "params"), [
    ("anthropic", "{temperature: 0.2, maxTokens: 100, top_k: 5, thinking: {type: enabled}}"),
    ("openai", "{topP: 0.9, response_format: {type: json_object}, cache_prompt: true}"),
    ("google", "{topK: 3, responseMimeType: application/json}"),
    ("anthropic", "{my_gateway_route: blue}"),  # unknown on purpose, close to nothing known
])
def test_known_and_deliberately_unknown_params_pass_strict(
    tmp_path: Path, provider: str, params: str
) -> None:
    done = validate(tmp_path, provider, params, "--strict")
    assert done.returncode == 0, done.stdout
    assert _params_warnings(done) == []
