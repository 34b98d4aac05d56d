"""Hostile input, item 4: confinement of the standard tools and of ``scriptFile``.

Repros: ``file-system`` read ``../``, absolute paths, symlinks out and ``/proc/self/environ``;
``http-fetch`` reached any host, through redirects too; a ``setsid`` job outlived its ``bash``
call; a scripted Model's ``scriptFile`` could name any file.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from goondan.cli import cli
from goondan.errors import BundleError, ConfigError
from goondan.llm.base import ModelSpec
from goondan.llm.testing import scripted_from_spec
from goondan.runtime import Runtime
from goondan.tools import ToolContext, ToolFailure, ToolRegistry, load_entry_module
from goondan.tools.executor import ToolExecutor
from goondan.tools.output import ToolSettings
from goondan.types import ToolCall
from tests.support.aio import run
from tests.support.hostile import write_bundle
from tests.support.loopback import loopback_server, url_of

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
fs_module = load_entry_module(TOOLS / "file_system.py")
bash = load_entry_module(TOOLS / "bash.py").handlers
http = load_entry_module(TOOLS / "http_fetch.py").handlers


def ctx(workdir: Path, **config: Any) -> ToolContext:
    return ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir, config=config)


def fs_failure(workdir: Path, export: str, args: dict[str, Any], **config: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        fs_module.handlers[export](ctx(workdir, **config), args)
    return info.value


# -- file-system ----------------------------------------------------------------------------------

@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "inside").mkdir(parents=True)
    (work / "inside" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", work / "link-out")
    os.symlink(tmp_path, work / "dir-out")
    os.symlink(work / "inside" / "a.txt", work / "link-in")
    return work


@pytest.mark.parametrize("path", [
    "../secret.txt", "inside/../../secret.txt", "link-out", "dir-out/secret.txt", "/etc/passwd",
    "/proc/self/environ",
])
def test_file_system_refuses_paths_outside_the_workdir(workdir: Path, path: str) -> None:
    for export, args in (("read", {"path": path}), ("write", {"path": path, "content": "x"}),
                         ("list", {"path": path}), ("mkdir", {"path": path + "/new"})):
        err = fs_failure(workdir, export, args)
        assert err.code == "E_BASE_PATH_OUTSIDE", (export, path)
        assert "allowPaths" in (err.suggestion or "")
    assert (workdir.parent / "secret.txt").read_text() == "outside"


def test_file_system_inside_the_workdir_and_allow_paths(workdir: Path) -> None:
    read = fs_module.handlers["read"]
    assert read(ctx(workdir), {"path": "link-in"})["content"] == "inside"
    assert read(ctx(workdir), {"path": str(workdir / "inside" / "a.txt")})["content"] == "inside"
    listing = fs_module.handlers["list"](ctx(workdir), {})
    assert {e["name"] for e in listing["entries"]} >= {"link-out", "dir-out", "inside"}
    widened = ctx(workdir, allowPaths=[str(workdir.parent)])
    assert read(widened, {"path": "../secret.txt"})["content"] == "outside"
    assert read(widened, {"path": "link-out"})["content"] == "outside"
    with pytest.raises(ToolFailure):
        read(widened, {"path": "/proc/self/environ"})


def test_the_model_sees_a_clear_tool_error(workdir: Path) -> None:
    registry = ToolRegistry()
    registry.register({"name": "file-system__read", "parameters": {"type": "object"}},
                      fs_module.handlers["read"])
    executor = ToolExecutor(registry, settings=ToolSettings())
    result = run(
        executor.execute(
            ToolCall("c1", "file-system__read", {"path": "/proc/self/environ"}),
            catalog=["file-system__read"],
            context=ctx(workdir),
        )
    )
    assert result.error is not None and result.error.code == "E_BASE_PATH_OUTSIDE"
    assert "outside the agent's workdir" in result.error.message


# -- http-fetch -----------------------------------------------------------------------------------

class _Redirect(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        targets = {"/to-metadata": "http://169.254.169.254/latest/meta-data/",
                   "/to-mapped": "http://[::ffff:169.254.169.254]/",
                   "/to-ok": "/ok", "/to-google": "http://metadata.google.internal/"}
        if self.path in targets:
            self.send_response(302)
            self.send_header("Location", targets[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with loopback_server(_Redirect) as server:
        yield url_of(server)


def http_failure(url: str, **config: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        run(http["get"](ctx(Path.cwd(), **config), {"url": url, "timeoutMs": 5000}))
    return info.value


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://[::ffff:169.254.169.254]/",
    "http://metadata.google.internal/computeMetadata/v1/", "http://100.100.100.200/",
])
def test_link_local_and_metadata_hosts_are_refused(url: str) -> None:
    assert http_failure(url).code == "E_BASE_HTTP_DENIED"


@pytest.mark.parametrize("path", ["/to-metadata", "/to-mapped", "/to-google"])
def test_the_policy_is_checked_again_on_every_redirect(base_url: str, path: str) -> None:
    err = http_failure(base_url + path, allowPrivate=True)  # the first hop is allowed
    assert err.code == "E_BASE_HTTP_DENIED"
    assert "169.254" in err.message or "metadata" in err.message


def test_loopback_is_refused_by_default_and_opened_by_the_bundle(base_url: str) -> None:
    err = http_failure(base_url + "/ok")
    assert err.code == "E_BASE_HTTP_DENIED" and "loopback" in err.message
    out = run(http["get"](ctx(Path.cwd(), allowPrivate=True), {"url": base_url + "/to-ok"}))
    assert out["body"] == "ok" and out["url"] == base_url + "/ok"
    out = run(http["get"](ctx(Path.cwd(), allowHosts=["127.0.0.1"]), {"url": base_url + "/ok"}))
    assert out["status"] == 200
    assert (
        http_failure(base_url + "/ok", allowPrivate=True, denyHosts=["127.0.0.0/8"]).code
        == "E_BASE_HTTP_DENIED"
    )
    assert http_failure(base_url + "/ok", allowHosts=["*.example.com"]).code == "E_BASE_HTTP_DENIED"
    # A wildcard pattern is not explicit enough to open a default denial.
    assert http_failure(base_url + "/ok", allowHosts=["*"]).code == "E_BASE_HTTP_DENIED"
    # allowHosts may re-open a default denial explicitly (checked, never contacted here).
    policy = load_entry_module(TOOLS / "_hosts.py").HostPolicy.from_config(
        {"allowHosts": ["169.254.0.0/16"]}
    )
    policy.target("http://169.254.169.254/")


# -- bash -----------------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _wait_dead(pid: int, deadline_s: float = 20.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc")
@pytest.mark.parametrize("launcher", ["", "setsid "])
def test_a_bash_timeout_kills_every_process_it_started(tmp_path: Path, launcher: str) -> None:
    """The group gets the timeout; a ``setsid`` job that left it is found by its marker."""
    pid_file = tmp_path / "bg.pid"
    command = f"{launcher}sh -c 'echo $$ > {pid_file}; exec sleep 60' & sleep 60"
    out = run(bash["exec"](ctx(tmp_path), {"command": command, "timeoutMs": 500}))
    assert out["timedOut"] is True
    pid = int(pid_file.read_text().strip())
    assert _wait_dead(pid), f"background job {pid} outlived its call"


# -- scriptFile -----------------------------------------------------------------------------------

@pytest.mark.parametrize("script_file", ["../outside.yaml", "/etc/hostname", "link.yaml"])
def test_script_file_is_confined_like_entry(
    tmp_path: Path, state_root: Path, script_file: str
) -> None:
    bundle = write_bundle(tmp_path)
    (tmp_path / "outside.yaml").write_text("- text: leaked\n")
    os.symlink(tmp_path / "outside.yaml", bundle / "link.yaml")
    manifest = bundle / "goondan.yaml"
    manifest.write_text(manifest.read_text().replace(
        '    loop: true\n    script: [{text: "ok"}]\n', f"    scriptFile: {script_file}\n"))
    result = CliRunner().invoke(cli, ["validate", str(bundle)])
    assert result.exit_code != 0 and "E_CONFIG_PATH_ESCAPE" in result.output

    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root) as rt:
            await rt.run_turn("main", "hi")

    with pytest.raises(BundleError) as info:
        run(main())
    assert [d.code for d in info.value.errors] == ["E_CONFIG_PATH_ESCAPE"]
    # The provider itself refuses too (a Model built without the validator).
    spec = ModelSpec(
        provider="scripted", model="fake", name="fake", options={"scriptFile": script_file}
    )
    with pytest.raises(ConfigError) as raised:
        scripted_from_spec(spec, bundle)
    assert raised.value.code == "E_CONFIG_PATH_ESCAPE"
