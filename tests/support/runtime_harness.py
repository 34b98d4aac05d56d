"""Runtime test helpers: the basic bundle path, asyncio.run, base.jsonl shapes.

The suite has no async plugin: test bodies are ``async def main()`` run with ``asyncio.run``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goondan.runtime import AgentInstance
from tests.support.aio import run as run  # older imports of run from here

BASIC = Path(__file__).resolve().parent.parent / "fixtures" / "runtime" / "basic"


def base_records(instance: AgentInstance) -> list[dict[str, Any]]:
    """The message records of the instance's base.jsonl (of its committed messages, as the
    PostgreSQL backend stores them, for an instance there)."""
    store: Any = instance.store
    if getattr(store, "paths", None) is None:  # PostgreSQL: the goondan_messages rows
        rows = store.read("read the messages", lambda conn: conn.execute(
            "SELECT message FROM goondan_messages WHERE instance_id = %s ORDER BY position",
            (store.instance_id,)).fetchall())
        return [json.loads(row[0]) for row in rows]
    path = instance.store.paths.base
    if not path.exists():
        return []
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def shape(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(role, source type, detail)`` per message: text, tool-call names, tool-result kinds."""
    out: list[tuple[str, str, str]] = []
    for record in records:
        data, source = record["data"], record["source"]
        content = data["content"]
        if isinstance(content, str):
            detail = content
        else:
            bits = []
            for part in content:
                if part["type"] == "text":
                    bits.append(part["text"])
                elif part["type"] == "tool-call":
                    bits.append(f"call:{part['toolName']}")
                elif part["type"] == "tool-result":
                    bits.append(f"result:{part['toolName']}:{part['output']['type']}")
            detail = "|".join(bits)
        out.append((data["role"], source["type"], detail))
    return out


FAKE_KEY_ENV = "GOONDAN_FAKE_PROVIDER_KEY"
_SCRIPTED_MODEL = """  provider: scripted
  model: fake
  options:
    script: ["unused"]
"""


def fake_provider_bundle(tmp_path: Path, endpoint: str) -> Path:
    """A copy of the basic bundle whose Model talks OpenAI to ``endpoint`` (the fake server).

    The key comes from ``$GOONDAN_FAKE_PROVIDER_KEY`` (set it in the subprocess environment).
    """
    import shutil

    target = tmp_path / "bundle"
    shutil.copytree(BASIC, target, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = target / "goondan.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert _SCRIPTED_MODEL in text
    replacement = (
        "  provider: openai\n"
        "  model: gpt-test\n"
        f"  endpoint: {endpoint}\n"
        f"  apiKey: {{valueFrom: {{env: {FAKE_KEY_ENV}}}}}\n"
    )
    manifest.write_text(text.replace(_SCRIPTED_MODEL, replacement), encoding="utf-8")
    return target


DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def delegation_over_http(tmp_path: Path, endpoint: str, *, provider: str = "openai") -> Path:
    """A copy of examples/delegation whose coordinator and worker Models talk to ``endpoint``
    (the fake server) with ``provider``'s wire format; key from ``$GOONDAN_FAKE_PROVIDER_KEY``."""
    import shutil

    target = tmp_path / "delegation"
    shutil.copytree(DELEGATION, target, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = target / "goondan.yaml"
    text = manifest.read_text(encoding="utf-8")
    for name in ("coordinator", "worker"):
        scripted = (
            f"  provider: scripted\n  model: delegation-{name}\n"
            f"  options:\n    scriptFile: ./scripts/{name}.yaml\n"
        )
        assert scripted in text
        text = text.replace(scripted, (
            f"  provider: {provider}\n  model: fake-{name}\n  endpoint: {endpoint}\n"
            f"  apiKey: {{valueFrom: {{env: {FAKE_KEY_ENV}}}}}\n"
        ))
    manifest.write_text(text, encoding="utf-8")
    return target


def goondan_cmd(*args: str) -> list[str]:
    """The command line running the goondan CLI of this checkout with this interpreter."""
    import sys

    return [sys.executable, "-m", "goondan", *args]
