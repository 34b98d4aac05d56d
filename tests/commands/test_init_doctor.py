"""`goondan init` scaffolds valid projects; `goondan doctor` reports and exits correctly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from goondan import validate_bundle
from tests.support.cli_main import run


@pytest.mark.parametrize("template", ["default", "multi-agent", "minimal"])
def test_init_creates_a_valid_bundle(
    tmp_path: Path, template: str, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "My Project"
    code, out, _ = run(capsys, "init", str(project), "--template", template, "--no-git")
    assert code == 0, out
    docs = list(yaml.safe_load_all((project / "goondan.yaml").read_text()))
    assert docs[0]["kind"] == "Package" and docs[0]["metadata"]["name"] == "my-project"
    assert docs[-1]["kind"] == "Swarm" and docs[-1]["metadata"]["name"] == "default"
    report = validate_bundle(project)
    assert report.valid, [d.to_dict() for d in report.errors]


def test_init_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "init", str(tmp_path), "--no-git")[0] == 0
    code, _, err = run(capsys, "init", str(tmp_path), "--no-git")
    assert code == 3 and "[E_INIT_EXISTS]" in err
    assert run(capsys, "init", str(tmp_path), "--no-git", "--force")[0] == 0


def test_doctor_on_a_valid_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "init", str(tmp_path / "p"), "--no-git")
    code, out, _ = run(
        capsys, "doctor", "--bundle", str(tmp_path / "p"), "--state-root", str(tmp_path / "s")
    )
    assert code == 0, out
    assert out.startswith("Goondan Doctor")
    assert "✓ [Bundle]" in out and "Summary:" in out
    assert "⚠ [API keys]" in out  # conftest strips every key


def test_doctor_fails_on_a_state_root_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "file"
    bad.write_text("x")
    code, out, _ = run(capsys, "doctor", "--bundle", str(tmp_path), "--state-root", str(bad))
    assert code == 1
    assert "✗ [State] state root" in out


def test_doctor_masks_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdefghijklmnop")
    _, out, _ = run(
        capsys, "doctor", "--bundle", str(tmp_path), "--state-root", str(tmp_path / "s")
    )
    assert "sk-proj-abcdefghijklmnop" not in out
    assert "OPENAI_API_KEY: set (sk-p…)" in out


def test_doctor_asks_only_for_the_keys_the_bundle_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "p"
    (project).mkdir()
    (project / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: local}\n"
        "spec: {provider: openai-compatible, model: m, endpoint: 'http://127.0.0.1:8080/v1'}\n"
        "---\napiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: claude}\n"
        "spec: {provider: anthropic, model: c}\n"
        "---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {name: a}\n"
        "spec: {modelConfig: {modelRef: Model/local}, prompts: {systemPrompt: hi}}\n"
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\n"
        "spec: {entryAgent: Agent/a, agents: [Agent/a]}\n"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdefghijklmnop")
    code, out, _ = run(
        capsys, "doctor", "--bundle", str(project), "--state-root", str(tmp_path / "s")
    )
    assert code == 0, out
    assert "✓ [API keys] Model/local: no key needed (http://127.0.0.1:8080/v1)" in out
    assert "⚠ [API keys] Model/claude: needs ANTHROPIC_API_KEY" in out
    assert "OPENAI_API_KEY" not in out and "GEMINI" not in out  # no Model needs them


def test_missing_key_error_suggests_the_offline_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    project = tmp_path / "p"
    assert run(capsys, "init", str(project), "--no-git", "-q") == (0, "", "")  # -q: really quiet
    (project / ".env").write_text("", encoding="utf-8")
    manifest = project / "goondan.yaml"  # loopback: the test network policy allows it; a named
    # key variable makes the key required there too (on the public host it always is)
    manifest.write_text(manifest.read_text().replace(
        "  model: claude-sonnet-4-20250514\n", "  model: claude-sonnet-4-20250514\n  endpoint: http://127.0.0.1:9\n"
        "  apiKey: {valueFrom: {env: ANTHROPIC_API_KEY}}\n"))
    code, _, err = run(capsys, "repl", "--bundle", str(project), "--input", "hi")
    assert code == 6 and "[E_LLM_AUTH]" in err, err
    assert 'point the Agent\'s modelRef at "Model/offline"' in err


def test_multi_agent_template_gives_the_planner_the_agents_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "init", str(tmp_path / "t"), "-t", "multi-agent", "--no-git")
    docs = list(yaml.safe_load_all((tmp_path / "t" / "goondan.yaml").read_text()))
    package = docs[0]
    assert {"name": "@goondan/base", "version": "0.1.0"} in package["spec"]["dependencies"]
    agents = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Agent"}
    assert agents["planner"]["spec"]["tools"] == [{"ref": {"kind": "Tool", "name": "agents",
                                                           "package": "@goondan/base"}}]
    offline = next(d for d in docs if d["kind"] == "Model" and d["metadata"]["name"] == "offline")
    steps = offline["spec"]["options"]["script"][-1]["steps"]
    assert [c["args"]["target"] for s in steps for c in s.get("toolCalls", [])] == [
        "coder",
        "reviewer",
    ]


def test_doctor_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    run(capsys, "init", str(tmp_path / "p"), "--no-git")
    code, out, _ = run(capsys, "doctor", "--bundle", str(tmp_path / "p"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["fail"] == 0
    assert {"category", "name", "status", "detail", "suggestion"} <= set(doc["checks"][0])
    code, out2, _ = run(capsys, "--json", "doctor", "--bundle", str(tmp_path / "p"))
    assert code == 0 and json.loads(out2)["summary"] == doc["summary"]
