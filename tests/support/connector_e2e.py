"""Helpers for the built-in connectors under a real ``goondan run --foreground``: bundles
whose Model is the fake provider (OpenAI wire), the foreground process, the connector's
``address.json`` and the stored conversations (tests/e2e/test_base_connectors_run.py and
tests/e2e/test_connector_delivery.py)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from goondan.swarm.state import read_active
from tests.support.runtime_harness import FAKE_KEY_ENV

__all__ = [
    "FAKE_KEY",
    "address_file",
    "base_bundle",
    "goondan_run",
    "http_request",
    "instances",
    "sign_webhook",
    "start_run",
    "wait_for",
    "webhook_port",
]

REPO = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-connector-e2e-key"


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; AssertionError after the (failure-only) ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def base_bundle(root: Path, endpoint: str | None, agents: dict[str, str], documents: str) -> Path:
    """A bundle depending on ``@goondan/base``: one Model (the fake provider at ``endpoint``, or
    a looping scripted "ok" when None), ``agents`` (name → YAML of ``tools:`` or ""), the first
    one the entry agent of Swarm ``default``, plus ``documents`` (Connections)."""
    root.mkdir(parents=True, exist_ok=True)
    if endpoint is None:
        model = "  provider: scripted\n  model: ok\n  options: {loop: true, script: [ok]}\n"
    else:
        model = (f"  provider: openai\n  model: fake-model\n  endpoint: {endpoint}\n"
                 f"  apiKey: {{valueFrom: {{env: {FAKE_KEY_ENV}}}}}\n")
    text = (
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: connector-e2e}\nspec:\n"
        '  version: "0.1.0"\n  dependencies:\n    - {name: "@goondan/base", version: "0.1.0"}\n'
        "---\napiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: main}\nspec:\n" + model
    )
    for name, tools in agents.items():
        text += (
            f"---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {{name: {name}}}\nspec:\n"
            "  modelConfig: {modelRef: Model/main}\n  "
            f"prompts: {{systemPrompt: You are {name}.}}\n"
            f"{tools}"
        )
    refs = ", ".join(f"{{ref: Agent/{name}}}" for name in agents)
    text += (f"---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {{name: default}}\nspec:\n"
             f"  entryAgent: Agent/{next(iter(agents))}\n  agents: [{refs}]\n---\n{documents}")
    (root / "goondan.yaml").write_text(text, encoding="utf-8")
    return root


def start_run(bundle: Path, state_root: Path, env: dict[str, str],
              args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """``goondan run --foreground [args]`` in its own process group (output discarded: the logs
    are under the state root)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(bundle),
            "--foreground",
            *args,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY, **env},
    )


@contextlib.contextmanager
def goondan_run(bundle: Path, state_root: Path, env: dict[str, str],
                args: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """A running swarm (``args``: more ``goondan run`` options, e.g. ``--engine ray``); killed
    with its whole process group if the test left it running."""
    proc = start_run(bundle, state_root, env, args)
    try:
        wait_for(lambda: ((a := read_active(state_root)) is not None and a.pid == proc.pid)
                 or proc.poll() is not None, 60, "the orchestrator")
        assert proc.poll() is None, "goondan run exited at start"
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def address_file(state_root: Path, connection: str) -> Path | None:
    """``address.json`` of an HTTP connector's Connection (docs/base-connectors.md)."""
    found = list(
        state_root.glob(f"workspaces/*/connections/default/{connection}/state/address.json")
    )
    return found[0] if found else None


def webhook_port(state_root: Path, connection: str, timeout: float = 60) -> int:
    """Wait for the connector to listen; its port (``PORT: 0``)."""
    port: list[int] = []

    def ready() -> bool:
        path = address_file(state_root, connection)
        with contextlib.suppress(OSError, ValueError, KeyError):
            if path is not None:
                port.append(int(json.loads(path.read_text())["port"]))
        return bool(port)

    wait_for(ready, timeout, f"{connection}'s address.json")
    return port[0]


def sign_webhook(secret: str, body: bytes) -> str:
    """The ``X-Signature-256`` value of ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def http_request(port: int, method: str, path: str, body: bytes = b"",
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """One request on a fresh connection; (status, JSON answer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body or None,
                     headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def instances(state_root: Path) -> dict[str, dict[str, Any]]:
    """instanceKey → {"metadata": metadata.json, "messages": base.jsonl + events.jsonl text}."""
    out: dict[str, dict[str, Any]] = {}
    for meta in state_root.glob("workspaces/*/instances/*/metadata.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(meta.read_text())
            text = "".join((meta.parent / "messages" / name).read_text()
                           for name in ("base.jsonl", "events.jsonl")
                           if (meta.parent / "messages" / name).exists())
            out[data["instanceKey"]] = {"metadata": data, "messages": text}
    return out
