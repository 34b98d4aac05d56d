"""Issue 27, item 3: listening connectors fail closed.

A ``webhook``/``github``/``slack`` Connection whose signing secret comes from an unset
environment variable used to accept unsigned requests with only a warning in a log file. Now
``goondan run`` (also ``-d``) refuses to start with ``E_CONNECTOR_UNSIGNED`` on the terminal,
the connector itself refuses to start, and only ``ALLOW_UNSIGNED: "true"`` opens it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.errors import ConnectorError
from goondan.swarm.state import read_active
from tests.support.connector_e2e import REPO, base_bundle, sign_webhook
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)

CONNECTION = """apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: hooks}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config:
    PORT: {value: "0"}
  secrets:
    SIGNING_SECRET: {valueFrom: {env: HOOKS_SIGNING_SECRET}}
"""


def _goondan(
    state_root: Path, bundle: Path, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(bundle),
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        env={k: v for k, v in {**os.environ, **env}.items() if k != "HOOKS_SIGNING_SECRET"},
    )


def _stop_if_started(state_root: Path) -> None:
    """The old code started the swarm: kill it so the failing test leaves nothing behind."""
    active = read_active(state_root)
    if active is not None and active.alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(active.pid, signal.SIGKILL)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "mode", [("--detach",), ("--foreground",)], ids=["run -d", "run --foreground"]
)
def test_run_refuses_an_unsigned_listening_connection_on_the_terminal(
    tmp_path: Path, mode: tuple[str, ...]
) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, CONNECTION)
    state_root = tmp_path / "state"
    try:
        result = _goondan(state_root, bundle, *mode, env={})
    except subprocess.TimeoutExpired:  # the old code: --foreground ran the swarm
        _stop_if_started(state_root)
        raise AssertionError("goondan run started with an unsigned webhook Connection") from None
    _stop_if_started(state_root)
    assert result.returncode != 0
    assert "E_CONNECTOR_UNSIGNED" in result.stderr
    assert "HOOKS_SIGNING_SECRET" in result.stderr  # which variable is missing
    assert 'ALLOW_UNSIGNED: "true"' in result.stderr  # the way out, if it is meant
    assert "Traceback" not in result.stderr
    assert read_active(state_root) is None  # nothing was started


def test_the_connectors_refuse_to_start_without_a_secret(tmp_path: Path) -> None:
    async def body() -> None:
        for name, config in (("webhook", {"PORT": "0"}), ("github", {"PORT": "0"}),
                             ("slack", {"SLACK_WEBHOOK_PORT": "0"})):
            ctx = make_context(tmp_path / name, RecordingInbox(), connector=name, config=config)
            with pytest.raises(ConnectorError) as info:
                async with running(load_connector(name), ctx):
                    pass
            assert info.value.code == "E_CONNECTOR_UNSIGNED", name
            assert "ALLOW_UNSIGNED" in (info.value.suggestion or "")

    asyncio.run(body())


def test_allow_unsigned_true_accepts_unsigned_requests(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        ctx = make_context(tmp_path, inbox, connector="webhook",
                           config={"PORT": "0", "ALLOW_UNSIGNED": "true"})
        async with running(load_connector("webhook"), ctx) as url:
            assert (await post(url, {"text": "open on purpose"}))[0] == 200
        assert len(inbox.events) == 1

    asyncio.run(body())


@pytest.mark.parametrize("value", ["false", "yes", "1", ""])
def test_allow_unsigned_other_than_true_keeps_the_check(tmp_path: Path, value: str) -> None:
    ctx = make_context(tmp_path, RecordingInbox(), connector="webhook",
                       config={"PORT": "0", "ALLOW_UNSIGNED": value})
    with pytest.raises(ConnectorError) as info:
        asyncio.run(load_connector("webhook").run(ctx))
    assert info.value.code == "E_CONNECTOR_UNSIGNED"


def test_the_recommended_name_webhook_secret_is_read(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        ctx = make_context(tmp_path, inbox, connector="webhook", config={"PORT": "0"},
                           secrets={"WEBHOOK_SECRET": "recommended-name"})
        async with running(load_connector("webhook"), ctx) as url:
            payload = b'{"text": "hi"}'
            assert (await post(url, payload))[0] == 401  # the secret is in force
            assert (
                await post(
                    url, payload, {"X-Signature-256": sign_webhook("recommended-name", payload)}
                )
            )[0] == 200

    asyncio.run(body())
