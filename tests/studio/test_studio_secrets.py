"""The studio masks the secrets of a workspace that appeared after it started (a swarm run
for the first time while the page is open), not only those it knew at start."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from goondan.conversation.messages import Message, MessageEvent
from goondan.studio.server import StudioServer
from goondan.workspace.record import record_workspace
from goondan.workspace.store import InstanceStore
from tests.support.studio_client import request

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: main}
spec:
  provider: openai
  model: gpt-4o-mini
  apiKey: {valueFrom: {env: STUDIO_LATE_API_KEY}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: assistant}
spec:
  modelConfig: {modelRef: Model/main}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/assistant
  agents: [Agent/assistant]
"""


def test_a_workspace_recorded_after_the_studio_started_is_masked(
    state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-late-" + secrets.token_hex(8)
    monkeypatch.setenv("STUDIO_LATE_API_KEY", secret)
    with StudioServer(state_root, port=0).start() as studio:
        assert request(studio.url, "/api/overview")[0] == 200  # started, nothing known yet
        bundle = tmp_path / "late-bundle"
        bundle.mkdir()
        (bundle / "goondan.yaml").write_text(BUNDLE)
        record_workspace(state_root, "ws-late", bundle, ["STUDIO_LATE_API_KEY"])
        with InstanceStore.open(state_root, "ws-late", "assistant", "k") as store:
            state = store.load()
            event = MessageEvent.append(Message.user(f"my key is {secret}"))
            state.emit(event)
            store.append_event(event, "t1")
            store.commit(state)
        status, _, doc = request(studio.url, "/api/conversations/ws-late/assistant/k")
    assert status == 200
    assert doc["messages"][0]["text"] == "my key is ***"
    assert secret not in json.dumps(doc)
