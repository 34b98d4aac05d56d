"""The repl asks inline when a turn parks on an approval (docs/approvals.md "Answering it")."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from goondan.console.backend import InstanceBackend
from goondan.console.session import ReplSession
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from tests.support.approvals_example import approvals_bundle


class _Reader:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.prompts: list[str] = []

    def read(self, prompt: str, continuation: str = "... ") -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)


def _session(tmp_path: Path, answers: list[str], model: ScriptedModel) -> tuple[str, Path, _Reader]:
    root = approvals_bundle(tmp_path)
    runner = asyncio.Runner()
    out = io.StringIO()
    reader = _Reader(answers)
    rt = Runtime.from_bundle(
        root, state_root=tmp_path / "s", models={"assistant": model}, stream=False
    )
    try:
        instance = runner.run(rt.instance(None, "k"))
        session = ReplSession(
            InstanceBackend(instance), runner, reader=reader, out=out, stream=False
        )  # type: ignore[arg-type]
        session._turn("delete old.txt")
    finally:
        runner.run(rt.aclose())
        runner.close()
    return out.getvalue(), root, reader


def _model(final: str) -> ScriptedModel:
    call: dict[str, Any] = {"name": "files__delete", "args": {"path": "old.txt"}}
    return ScriptedModel([{"toolCalls": [call]}, final])


def test_show_args_then_approve_resumes_the_turn(tmp_path: Path) -> None:
    out, root, reader = _session(tmp_path, ["s", "y"], _model("deleted it"))
    assert "files__delete waits for approval" in out and '"path": "old.txt"' in out
    assert "deleted it" in out and not (root / "work" / "old.txt").exists()
    assert len(reader.prompts) == 2


def test_deny_with_a_reason_and_later_leaves_it_pending(tmp_path: Path) -> None:
    model = _model("kept it")
    out, root, _ = _session(tmp_path, ["n", "not now"], model)
    assert "kept it" in out and (root / "work" / "old.txt").exists()
    assert "not now" in json.dumps(model.requests[1].messages)
    later, root2, _ = _session(tmp_path / "later", ["l"], _model("unused"))
    assert "left pending: goondan approvals approve|deny apr_" in later
    assert (root2 / "work" / "old.txt").exists()
