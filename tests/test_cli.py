"""The CLI's single error boundary: codes, exit statuses, no tracebacks without --debug."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from goondan import cli
from tests.support.cli_main import run


@pytest.fixture
def boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "boom", ("tests.support.cli_commands", "boom", "test"))


def test_help_lists_commands_without_importing_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "Commands:" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and "goondan" in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "no-such-command")
    assert code == 2
    assert "No such command" in err


def test_config_error_prints_code_location_suggestion(
    boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "boom")
    assert code == 3
    assert out == ""
    assert "[E_CONFIG_NOT_FOUND] bundle not found" in err
    assert "at: ./nope" in err and "suggestion: pass a directory" in err
    assert "help: docs/errors.md#e_config_not_found" in err
    assert "Traceback" not in err


def test_json_errors(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--json", "boom")
    payload = json.loads(err)
    assert code == 3
    assert payload["code"] == "E_CONFIG_NOT_FOUND" and payload["exitCode"] == 3
    assert payload["suggestion"].startswith("pass a directory")


def test_secrets_are_masked_in_errors(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "boom", "--kind", "auth")
    assert code == 6
    assert "sk-test-SECRET-value-123" not in err
    assert "***" in err


def test_bug_has_no_traceback_without_debug(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "boom", "--kind", "bug")
    assert code == 1
    assert "Traceback" not in err
    assert "[E_INTERNAL] unexpected ZeroDivisionError" in err and "--debug" in err


def test_bug_has_traceback_with_debug(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--debug", "boom", "--kind", "bug")
    assert code == 1
    assert "Traceback" in err


def test_keyboard_interrupt_exits_130(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "boom", "--kind", "interrupt")
    assert code == 130


def test_python_dash_m_and_help_are_fast_imports() -> None:
    """`goondan --help` must not import heavy modules (yaml, urllib3, asyncio runtime)."""
    probe = (
        "import sys, runpy; sys.argv=['goondan','--help'];\n"
        "try:\n    runpy.run_module('goondan', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "heavy=[m for m in "
        "('yaml','urllib3','goondan.runtime','goondan.llm.http','goondan.config') "
        "if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert "HEAVY []" in result.stderr, result.stderr
    assert "Usage: goondan" in result.stdout


def test_verbose_prints_goondan_log_records_on_stderr_masked(
    boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    from goondan.secrets import register_secret

    register_secret("sk-verbose-secret-999")
    logger = logging.getLogger("goondan.test")
    run(capsys, "-v", "boom", "--kind", "ok")
    logger.info("hello with sk-verbose-secret-999")
    logger.debug("not shown at -v")
    err = capsys.readouterr().err
    assert "goondan INFO [goondan.test] hello with ***" in err and "not shown" not in err
    run(capsys, "-q", "boom", "--kind", "ok")
    logger.warning("quiet hides warnings")
    assert "quiet hides" not in capsys.readouterr().err


def test_exit_codes_come_from_the_error_classes() -> None:
    from goondan.errors import LlmAuthError, TurnCancelled, exit_code_of

    assert exit_code_of("E_LLM_AUTH") == LlmAuthError.exit_code == 6
    assert exit_code_of("E_LLM_CONTEXT_LENGTH") == 5
    assert exit_code_of("E_LLM_EMPTY_RESPONSE") == 5  # a code of its own, under LlmError
    assert exit_code_of("E_TURN_CANCELLED") == TurnCancelled.exit_code == 130
    assert exit_code_of("E_CONFIG_SOMETHING") == 3
    assert exit_code_of("E_TOOL_X") == 1 and exit_code_of("") == 1


_START_PATH_HEAVY = ("yaml", "urllib3", "asyncio", "ssl", "http.client", "importlib.metadata",
                     "goondan.config", "goondan.runtime", "goondan.console", "goondan.ipc",
                     "goondan.llm")


@pytest.mark.parametrize("code", [
    "import goondan",
    "import sys, runpy; sys.argv = ['goondan', '--help']\n"
    "try:\n    runpy.run_module('goondan', run_name='__main__')\nexcept SystemExit:\n    pass",
])
def test_import_and_help_load_no_heavy_module(code: str) -> None:
    """`import goondan` and `goondan --help` import none of the modules a command needs later
    (docs/runtime.md "Performance"): no YAML, HTTP, TLS or asyncio, no subcommand areas."""
    probe = (f"{code}\nimport sys\n"
             f"print('LOADED', sorted(m for m in {_START_PATH_HEAVY!r} if m in sys.modules))")
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert "LOADED []" in result.stdout, result.stdout + result.stderr
