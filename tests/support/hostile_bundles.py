"""Small bundles written into a temp dir for the hostile-input tests (tests/hostile/)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["write_bundle"]


def _yaml(value: Any) -> str:
    return json.dumps(value)  # JSON is YAML: no quoting surprises in generated documents


def write_bundle(
    root: Path,
    *,
    script: list[Any],
    extensions: dict[str, str] | None = None,
    tools: dict[str, tuple[str, list[str]]] | None = None,
    agent_extra: str = "",
    package: str = "hostile",
    loop: bool = False,
) -> Path:
    """Write ``goondan.yaml`` with a scripted Model, one Agent ``a`` and a Swarm.

    ``extensions`` maps an Extension name to its module source; ``tools`` maps a Tool name to
    ``(module source, export names)``. Returns ``root``.
    """
    root.mkdir(parents=True, exist_ok=True)
    docs = [
        f"apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: {package}\n",
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  "
        "name: fake\nspec:\n  provider: scripted\n"
        f"  model: fake\n  options:\n    loop: {_yaml(loop)}\n    script: {_yaml(script)}\n",
    ]
    refs_ext: list[str] = []
    for name, source in (extensions or {}).items():
        (root / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        docs.append(f"apiVersion: goondan.ai/v1\nkind: Extension\nmetadata:\n  name: {name}\n"
                    f"spec:\n  entry: ./{name}.py\n")
        refs_ext.append(f"    - ref: Extension/{name}\n")
    refs_tool: list[str] = []
    for name, (source, exports) in (tools or {}).items():
        (root / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        export_yaml = "".join(
            f"    - name: {e}\n      description: {e}\n      parameters: {{type: object}}\n"
            for e in exports
        )
        docs.append(f"apiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: {name}\n"
                    f"spec:\n  entry: ./{name}.py\n  exports:\n{export_yaml}")
        refs_tool.append(f"    - ref: Tool/{name}\n")
    agent = ("apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: a\nspec:\n"
             "  modelConfig:\n    modelRef: Model/fake\n  prompts:\n    systemPrompt: test\n")
    if refs_tool:
        agent += "  tools:\n" + "".join(refs_tool)
    if refs_ext:
        agent += "  extensions:\n" + "".join(refs_ext)
    agent += agent_extra
    docs.append(agent)
    docs.append("apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata:\n  name: default\nspec:\n"
                "  entryAgent: Agent/a\n  agents:\n    - ref: Agent/a\n")
    (root / "goondan.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return root
