"""Decision 18 under ``goondan run --foreground`` (real processes): a connector entry
``def run(ctx)`` (sync) runs in a thread of the connector process with the same ``ctx``; its
events become turns, and SIGTERM reaches it as ``ctx.stopping``."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.connector_e2e import base_bundle, goondan_run, instances, wait_for

pytestmark = [pytest.mark.e2e]

SYNC_CONNECTOR = '''\
from pathlib import Path


def run(ctx):
    receipt = ctx.emit_sync({"id": "sync-1", "name": "tick", "instanceKey": "sync",
                             "message": {"type": "text", "text": "from a sync connector"}})
    ctx.logger.info("emitted %s", receipt.id)
    ctx.stopping.wait()
    Path(ctx.config["STOPPED_FILE"]).write_text("stopped")
'''


def test_a_sync_connector_emits_and_stops_in_a_real_process(
    tmp_path: Path, state_root: Path
) -> None:
    stopped = tmp_path / "stopped.txt"
    documents = f"""\
apiVersion: goondan.ai/v1
kind: Connector
metadata: {{name: ticker}}
spec:
  entry: ./sync_connector.py
  events: [{{name: tick}}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: ticks}}
spec:
  connectorRef: Connector/ticker
  config:
    STOPPED_FILE: {{value: "{stopped}"}}
"""
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, documents)
    (bundle / "sync_connector.py").write_text(SYNC_CONNECTOR, encoding="utf-8")
    with goondan_run(bundle, state_root, {}) as proc:
        wait_for(
            lambda: (
                "sync" in instances(state_root)
                and "from a sync connector" in instances(state_root)["sync"]["messages"]
            ),
            60,
            "the turn",
        )
        assert not stopped.exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert stopped.read_text() == "stopped"  # the process gave the thread time to return
    assert instances(state_root)["sync"]["metadata"]["agentName"] == "assistant"
