"""Helpers for the hostile-input tests (``tests/hostile/test_input_*.py``).

A small bundle using the ``@goondan/base`` tools with a looping scripted model, a model
factory that talks OpenAI to the fake provider server, and an OpenAI chat completion body
written by hand (so it can carry a ``\\udcff`` escape no Python ``str`` could encode).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from goondan.llm import create_model
from goondan.llm.base import LanguageModel, ModelSpec
from tests.support.fake_provider import FakeProvider
from tests.support.runtime_harness import goondan_cmd

__all__ = ["completion_body", "openai_factory", "run_cli", "write_bundle"]

_BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: hostile
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fake
spec:
  provider: scripted
  model: fake
  options:
    loop: true
    script: [{{text: "ok"}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: main
spec:
  modelConfig:
    modelRef: Model/fake
  prompts:
    systemPrompt: Be brief.
  workdir: ./work
{agent_extra}  tools:
{tools}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: main
  agents: [main]
  instanceKey: hostile
"""

_DEFAULT_TOOLS = """\
    - ref: {kind: Tool, name: file-system, package: "@goondan/base"}
    - ref: {kind: Tool, name: bash, package: "@goondan/base"}
    - ref: {kind: Tool, name: http-fetch, package: "@goondan/base"}
"""


def write_bundle(tmp_path: Path, *, tools: str = _DEFAULT_TOOLS, agent_extra: str = "",
                 extra_docs: str = "") -> Path:
    """A bundle under ``tmp_path/bundle`` with agent ``main`` (workdir ``./work``)."""
    bundle = tmp_path / "bundle"
    (bundle / "work").mkdir(parents=True, exist_ok=True)
    text = _BUNDLE.format(tools=tools, agent_extra=agent_extra)
    (bundle / "goondan.yaml").write_text(text + (f"---\n{extra_docs}" if extra_docs else ""),
                                         encoding="utf-8")
    return bundle


def openai_factory(server: FakeProvider, key: str = "sk-hostile-test-key") -> Any:
    """``model_factory`` for ``Runtime``: the real OpenAI adapter against the fake server."""

    def factory(spec: ModelSpec) -> LanguageModel:
        return create_model(ModelSpec(provider="openai", model="gpt-test", api_key=key,
                                      endpoint=server.base_url("openai"), name=spec.name))

    return factory


def completion_body(content_json: str) -> bytes:
    """A non-streamed OpenAI chat completion whose ``content`` is the JSON text given verbatim
    (e.g. ``'"hi \\\\udcff"'``)."""
    head = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
    }
    prefix = json.dumps(head)[:-1]
    return (prefix + ',"choices":[{"index":0,"message":{"role":"assistant","content":'
            + content_json + '},"finish_reason":"stop"}],'
            '"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}').encode()


def run_cli(*args: str | bytes, input: bytes | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """Run the goondan CLI of this checkout (argv may hold raw bytes)."""
    argv: list[Any] = [*goondan_cmd(), *args]
    if cwd is not None:
        # ``-m goondan`` from another directory still needs this checkout on the path.
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.run(argv, input=input, capture_output=True, env=env, cwd=cwd, timeout=timeout,
                          check=False)
