"""The standard tools as a bundle uses them: manifest ↔ modules, a real turn,
``goondan validate``."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from goondan.cli import cli
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.tools import load_entry_module
from tests.support.aio import run

BASE = Path(__file__).resolve().parents[2] / "goondan" / "builtin_packages" / "@goondan" / "base"
STANDARD = {"bash", "file-system", "http-fetch", "json-query", "text-transform"}

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: notes
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
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: writer
spec:
  modelConfig:
    modelRef: Model/fake
  prompts:
    systemPrompt: Write notes.
  workdir: ./work
  tools:
    - ref: {kind: Tool, name: file-system, package: "@goondan/base"}
    - ref: {kind: Tool, name: text-transform, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: writer
  agents: [writer]
"""


def test_manifest_tools_match_their_modules() -> None:
    docs = [d for d in yaml.safe_load_all((BASE / "goondan.yaml").read_text()) if d]
    tools = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Tool"}
    assert set(tools) >= STANDARD
    for name in STANDARD:
        spec = tools[name]["spec"]
        assert tools[name]["metadata"]["labels"] == {"tier": "base"}
        handlers = load_entry_module(BASE / spec["entry"]).handlers
        exports = [e["name"] for e in spec["exports"]]
        assert sorted(handlers) == sorted(exports), name
        for export in spec["exports"]:
            assert export["description"] and export["parameters"]["type"] == "object"
    assert tools["bash"]["spec"]["errorMessageLimit"] == 1200
    assert tools["file-system"]["spec"]["errorMessageLimit"] == 2000


def test_an_agent_writes_a_file_in_its_workdir(tmp_path: Path, state_root: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "work").mkdir(parents=True)
    (bundle / "goondan.yaml").write_text(BUNDLE)
    result = CliRunner().invoke(cli, ["validate", str(bundle)])
    assert result.exit_code == 0, result.output

    model = ScriptedModel([
        {"toolCalls": [{"name": "file-system__write",
                        "args": {"path": "notes/today.md", "content": "# Today\n"}}]},
        "done",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"writer": model}
        ) as rt:
            turn = await rt.run_turn("writer", "write today's note")
            assert turn.response_message is not None and turn.response_message.text == "done"
            tool_results = [m for m in (await rt.instance("writer")).messages
                            if m.data.get("role") == "tool"]
            output = tool_results[0].data["content"][0]["output"]
            assert output["value"]["written"] is True

    run(main())
    assert (bundle / "work" / "notes" / "today.md").read_text() == "# Today\n"
    model.assert_complete()
