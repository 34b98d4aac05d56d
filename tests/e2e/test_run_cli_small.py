"""Issue 32 item 11: the smaller command-line surprises, each through the real CLI.

A fresh ``init`` passes ``validate --strict``; ``-q`` quiets ``validate``; Ctrl-C exits 130
everywhere; ``send --json`` prints the documented object on failures too; ``help:`` points at
the code's section of docs/errors.md; ``gdn`` gets shell completion; ``make demo`` does not
reinstall the package every time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goondan.swarm.state import read_active

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: small}
spec: {version: "0.1.0"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: ok, options: {loop: true, script: [ok]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/m}
  prompts: {systemPrompt: Help.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/helper, agents: [Agent/helper]}
"""


def goondan(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goondan", *args], capture_output=True, text=True,
                          timeout=90, cwd=cwd, check=False, stdin=subprocess.DEVNULL, env=env)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # even if this test run started with it ignored


def _bundle(tmp_path: Path, text: str = BUNDLE) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "goondan.yaml").write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize("template", ["default", "multi-agent", "minimal"])
def test_a_fresh_init_passes_validate_strict(tmp_path: Path, template: str) -> None:
    made = goondan("init", "project", "--template", template, "--no-git", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    checked = goondan("validate", "--strict", "project", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "warnings=0" in checked.stdout


def test_validate_reads_the_key_from_dot_env_as_run_does(tmp_path: Path) -> None:
    keyed = BUNDLE.replace(
        "spec: {provider: scripted,",
        "spec: {apiKey: {valueFrom: {env: SMALL_KEY}}, provider: scripted,",
    )
    root = _bundle(tmp_path, keyed)
    unset = goondan("validate", "--strict", cwd=root)
    assert unset.returncode == 4 and "W_CONFIG_ENV_UNSET" in unset.stdout
    (root / ".env").write_text("SMALL_KEY=small-key-value-1234\n", encoding="utf-8")
    done = goondan("validate", "--strict", cwd=root)
    assert done.returncode == 0, done.stdout


def test_quiet_validate_prints_only_the_problems(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    clean = goondan("-q", "validate", cwd=root)
    assert (clean.returncode, clean.stdout, clean.stderr) == (0, "", "")
    (root / "goondan.yaml").write_text(
        BUNDLE.replace("Agent/helper]}", "Agent/helpr]}"), encoding="utf-8"
    )
    broken = goondan("validate", "-q", cwd=root)
    assert broken.returncode == 4
    assert broken.stdout.startswith("error[E_CONFIG_REF_NOT_FOUND]"), broken.stdout
    assert (
        "Validating" not in broken.stdout
        and "Summary" not in broken.stdout
        and "✓" not in broken.stdout
    )


def test_send_json_failures_help_links_and_ctrl_c(tmp_path: Path, state_root: Path) -> None:
    root = _bundle(tmp_path)
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "PYTHONUNBUFFERED": "1"}
    # nothing runs: the documented answer object on stdout, the error on stderr, exit 3
    missing = goondan("send", "--json", "hello", cwd=root, env=env)
    assert missing.returncode == 3
    answer = json.loads(missing.stdout)
    assert answer["ok"] is False and answer["code"] == "E_RUN_NOT_RUNNING" and answer["message"]
    error = json.loads(missing.stderr)
    assert error["code"] == "E_RUN_NOT_RUNNING" and error["exitCode"] == 3
    # help: the code's section of docs/errors.md in this repository
    assert error["helpUrl"] == "docs/errors.md#e_run_not_running"
    text = goondan("send", "hello", cwd=root, env=env)
    assert "  help: docs/errors.md#e_run_not_running" in text.stderr
    assert "\n### E_RUN_NOT_RUNNING\n" in (REPO / "docs" / "errors.md").read_text(encoding="utf-8")

    proc = subprocess.Popen(
        [sys.executable, "-m", "goondan", "run", "--foreground"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 60
        while (active := read_active(state_root)) is None or not Path(
            active.control_socket or ""
        ).exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the swarm did not start"
            time.sleep(0.1)
        unknown = goondan("send", "--json", "--agent", "nobody", "hello", cwd=root, env=env)
        assert unknown.returncode != 0
        failed = json.loads(unknown.stdout)  # one object: no second, no partial answer
        assert (
            failed["ok"] is False
            and failed["code"] == "E_AGENT_NOT_FOUND"
            and "nobody" in failed["message"]
        )
        assert set(failed) <= {"ok", "code", "message", "suggestion"}
        assert json.loads(unknown.stderr)["code"] == "E_AGENT_NOT_FOUND"

        follow = subprocess.Popen(
            [sys.executable, "-m", "goondan", "logs", "-f"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_default_sigint,
        )
        assert follow.stdout is not None
        assert "Logs of orchestrator" in follow.stdout.readline()
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 130
        follow.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)  # Ctrl-C of a headless run: interrupted
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_gdn_gets_bash_completion(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gdn = bin_dir / "gdn"  # the console script: this interpreter, the worktree's goondan
    gdn.write_text(
        f"#!{sys.executable}\nfrom goondan.__main__ import run\nrun()\n", encoding="utf-8"
    )
    gdn.chmod(0o755)
    script = (
        'eval "$(gdn completion bash)"; complete -p gdn; '
        'COMP_WORDS=(gdn lo); COMP_CWORD=1; _goondan_completion gdn; echo "got: ${COMPREPLY[*]}"'
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [bash, "-c", script], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "_goondan_completion gdn" in done.stdout and "got: logs" in done.stdout, done.stdout


def test_make_demo_installs_only_when_pyproject_changes(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()

    def planned() -> str:
        return subprocess.run(
            [make, "-n", "demo", f"VENV={venv}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    assert "pip" in planned()  # the first time: installed
    (venv / ".installed").touch()
    later = planned()
    assert "pip" not in later and "goondan repl" in later
