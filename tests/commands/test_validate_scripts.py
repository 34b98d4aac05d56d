"""``goondan validate`` checks scripted-model scripts; ``validate --json`` is ``--format json``;
``fold`` without an argument explains both forms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli_main import run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_a_broken_script_is_a_validation_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(EXAMPLE, bundle)
    assert run(capsys, "validate", str(bundle))[0] == 0
    script = bundle / "scripts" / "worker.yaml"
    script.write_text("script:\n  - {text: fine}\n  - {nonsense: 1}\n")
    code, out, _ = run(capsys, "validate", str(bundle), "--json")
    report = json.loads(out)
    assert code == 4 and not report["valid"]
    (error,) = report["errors"]
    assert error["code"] == "E_LLM_SCRIPT_INVALID" and error["resource"] == "Model/worker-model"
    code, out, _ = run(capsys, "--json", "validate", str(bundle))  # the global --json too
    assert code == 4 and json.loads(out)["errors"][0]["code"] == "E_LLM_SCRIPT_INVALID"
    code, out, _ = run(capsys, "validate", str(bundle), "--no-color")
    assert code == 4 and "error[E_LLM_SCRIPT_INVALID]" in out and "1 error" in out


def test_fold_without_an_argument_explains_both_forms(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fold")
    assert code == 2 and "'goondan fold KEY'" in err and "'goondan fold --all'" in err
