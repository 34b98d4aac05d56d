"""Hostile input, item 1: text that is not valid Unicode never breaks a conversation.

The documented rule (docs/security.md): invalid UTF-8 bytes and lone surrogates become U+FFFD
at every boundary where text enters, and histories that already hold one are healed on load.
Each test replays one observed repro and then checks that a *later* turn still works.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goondan.connectors.event import ConnectorEvent, event_text
from goondan.conversation import Message
from goondan.ipc.protocol import IpcMessage, decode, encode
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner
from goondan.text import REPLACEMENT, clean_bytes, clean_json, clean_text
from goondan.types import AgentEvent
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.hostile import completion_body, openai_factory, run_cli, write_bundle
from tests.support.ipc_agents import in_process_worker

FFFD = REPLACEMENT


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def _records(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    data.decode("utf-8")  # every stored line is valid UTF-8
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def _base(state_root: Path) -> Path:
    found = sorted(state_root.rglob("base.jsonl"))
    assert len(found) == 1, found
    return found[0]


# -- the rule -------------------------------------------------------------------------------------

def test_the_rule_lone_surrogates_and_invalid_bytes_become_u_fffd() -> None:
    assert clean_text("ok") == "ok"
    assert clean_text("a\udcffb") == f"a{FFFD}b"
    assert clean_text("\ud800") == FFFD
    assert clean_text("\ud83d\ude00") == "\U0001f600"      # a pair is the character it encodes
    assert clean_text(os.fsdecode(b"bad\xff.txt")) == f"bad{FFFD}.txt"
    assert clean_bytes(b"hello \xff\xfe") == f"hello {FFFD}{FFFD}"
    value = {"k\udcff": ["x", {"y": "\udc80"}], "n": 1}
    assert clean_json(value) == {f"k{FFFD}": ["x", {"y": FFFD}], "n": 1}
    clean = {"a": ["b", {"c": 1}]}
    assert clean_json(clean) is clean                      # nothing to do: the same object


# -- stdin and argv -------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_piped_stdin_with_an_invalid_byte_then_a_second_turn(tmp_path: Path, state_root: Path,
                                                            locale: str) -> None:
    """Repro: ``printf 'K=1 hello \\xff\\n' | goondan repl`` broke every later turn."""
    bundle = write_bundle(tmp_path)
    env = {**os.environ, "LC_ALL": locale}
    first = run_cli("repl", "-b", str(bundle), input=b"K=1 hello \xff\n", env=env)
    assert first.returncode == 0, first.stderr.decode(errors="replace")
    assert first.stdout.decode() == "ok\n"
    second = run_cli("repl", "-b", str(bundle), "--input", "plain", env=env)
    assert second.returncode == 0, second.stderr.decode(errors="replace")
    users = [
        r["data"]["content"] for r in _records(_base(state_root)) if r["data"]["role"] == "user"
    ]
    assert users == [f"K=1 hello {FFFD}", "plain"]


@pytest.mark.e2e
def test_argv_with_undecodable_bytes_then_a_second_turn(tmp_path: Path, state_root: Path) -> None:
    """Repro: ``goondan repl --input $'hi \\xff'`` (argv arrives with a lone surrogate)."""
    bundle = write_bundle(tmp_path)
    first = run_cli("repl", "-b", str(bundle), "--input", b"hi \xff there")
    assert first.returncode == 0, first.stderr.decode(errors="replace")
    second = run_cli("repl", "-b", str(bundle), "--input", "plain")
    assert second.returncode == 0, second.stderr.decode(errors="replace")
    users = [
        r["data"]["content"] for r in _records(_base(state_root)) if r["data"]["role"] == "user"
    ]
    assert users == [f"hi {FFFD} there", "plain"]


@pytest.mark.e2e
def test_goondan_run_with_an_invalid_byte_answers_and_keeps_answering(tmp_path: Path) -> None:
    """Under ``goondan run`` the error used to be swallowed in the orchestrator: a hang."""
    bundle = write_bundle(tmp_path)
    result = run_cli("run", "-b", str(bundle), input=b"hello \xff\nagain\n")
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout.decode().splitlines() == ["ok", "ok"]


# -- tool output, provider text, stored history ---------------------------------------------------

@pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses non-UTF-8 file names")
def test_a_workdir_file_name_with_invalid_bytes_is_listed_then_turns_go_on(
    tmp_path: Path, state_root: Path, fake_provider: FakeProvider
) -> None:
    bundle = write_bundle(tmp_path)
    with open(os.path.join(os.fsencode(bundle / "work"), b"bad\xff.txt"), "wb") as handle:
        handle.write(b"x")
    fake_provider.enqueue(
        FakeReply.calls(FakeToolCall("file-system__list", {})),
        FakeReply.reply("listed"),
        FakeReply.reply("second"),
    )

    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, stream=False,
                                       model_factory=openai_factory(fake_provider)) as rt:
            assert (await rt.run_turn("main", "list")).text == "listed"
            assert (await rt.run_turn("main", "plain")).text == "second"

    run(main())
    # The provider saw the name with U+FFFD, as valid UTF-8 JSON.
    tool_message = next(
        m for m in fake_provider.requests[-1].json["messages"] if m["role"] == "tool"
    )
    assert f"bad{FFFD}.txt" in tool_message["content"]
    assert f"bad{FFFD}.txt" in _base(state_root).read_text(encoding="utf-8")


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_reply_with_a_udcff_escape_then_a_second_turn(
    tmp_path: Path, state_root: Path, fake_provider: FakeProvider, stream: bool
) -> None:
    """``"\\udcff"`` is valid JSON for a lone surrogate: it must not poison the history."""
    bundle = write_bundle(tmp_path)
    if stream:
        chunk = ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-test",'
                 '"choices":[{"index":0,"delta":{"role":"assistant","content":"hi \\udcff"},'
                 '"finish_reason":null}]}\n\n')
        done = ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-test",'
                '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
        first = FakeReply(raw_events=[chunk, done, "data: [DONE]\n\n"])
    else:
        first = FakeReply.malformed(completion_body('"hi \\udcff"'))
    fake_provider.enqueue(first, FakeReply.reply("second"))

    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, stream=stream,
                                       model_factory=openai_factory(fake_provider)) as rt:
            assert (await rt.run_turn("main", "one")).text == f"hi {FFFD}"
            assert (await rt.run_turn("main", "two")).text == "second"

    run(main())
    sent = fake_provider.requests[-1].json["messages"]
    assert {"role": "assistant", "content": f"hi {FFFD}"}.items() <= sent[2].items()


@pytest.mark.parametrize("file", ["base.jsonl", "events.jsonl"])
def test_a_stored_lone_surrogate_is_healed_when_the_history_is_loaded(
    tmp_path: Path, state_root: Path, fake_provider: FakeProvider, file: str
) -> None:
    """A history written by an older version (``\\udcff`` escapes on disk) keeps working."""
    bundle = write_bundle(tmp_path)
    model = ScriptedModel(["first"])

    async def first_turn() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, models={"main": model}) as rt:
            await rt.run_turn("main", "hello")

    run(first_turn())
    base = _base(state_root)
    poisoned = {"id": "msg-poisoned", "data": {"role": "user", "content": "bad \\udcff"},
                "metadata": {}, "createdAt": "2026-01-01T00:00:00.000Z", "source": {"type": "user"}}
    line = json.dumps(poisoned).replace("\\\\udcff", "\\udcff")
    assert "\\udcff" in line and json.loads(line)["data"]["content"] == "bad \udcff"
    if file == "base.jsonl":
        with base.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    else:
        event = '{"type":"append","message":' + line + ',"turnId":"turn-old"}'
        with (base.parent / "events.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(event + "\n")
    fake_provider.enqueue(FakeReply.reply("healed"))

    async def second_turn() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, stream=False,
                                       model_factory=openai_factory(fake_provider)) as rt:
            assert (await rt.run_turn("main", "again")).text == "healed"

    run(second_turn())
    contents = [m.get("content") for m in fake_provider.requests[0].json["messages"]]
    assert f"bad {FFFD}" in contents
    if file == "events.jsonl":  # recovery folded the event: the line was rewritten healed
        assert "\\udcff" not in base.read_text(encoding="utf-8")


# -- IPC, orchestrator and connectors ------------------------------------------------------------

def test_an_ipc_frame_with_a_lone_surrogate_is_sent_with_u_fffd() -> None:
    event = AgentEvent(type="message", input="x")
    event.metadata["note"] = "late \udcff"   # set after construction, as a middleware might
    message = decode(encode(IpcMessage.event("a", "b", event)))
    assert message.agent_event().metadata["note"] == f"late {FFFD}"
    assert AgentEvent(type="message", input="in \udcff").input == f"in {FFFD}"


def test_an_exception_in_the_orchestrators_send_path_fails_the_request() -> None:
    """A send that raises must answer the requester with an error, never hang it."""

    async def main() -> None:
        spawner = InProcessSpawner(in_process_worker(["a"], None))
        orch = Orchestrator(
            spawner, swarm_name="t", entry_agent="a", agents=["a"], reconcile_interval_s=0
        )
        async with orch:
            first = await orch.request("a", "echo:warm", timeout_ms=30_000)
            assert first.metadata.get("error") is None
            handle = orch.records[("a", "default")].handle
            assert handle is not None
            original = handle.transport.send

            async def broken(message: IpcMessage) -> None:
                if message.type == "event" and message.payload.get("input") == "echo:boom":
                    raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
                await original(message)

            handle.transport.send = broken  # type: ignore[method-assign]
            async with asyncio.timeout(20):   # failure-only deadline: the bug was a hang
                answer = await orch.request("a", "echo:boom", timeout_ms=None)
            assert answer.metadata["error"]["code"] == "E_IPC_BAD_MESSAGE"
            after = await orch.request("a", "echo:after", timeout_ms=30_000)
            assert after.metadata.get("error") is None

    asyncio.run(main())


def test_connector_payloads_are_sanitised() -> None:
    event = ConnectorEvent.from_dict({
        "name": "webhook\udcff", "instanceKey": "k",
        "message": {"type": "text", "text": "hi \udcff"}, "properties": {"p": "v\udc80"},
    })
    assert event_text(event) == f"hi {FFFD}" and event.properties == {"p": f"v{FFFD}"}
    assert event.name == f"webhook{FFFD}"
    assert ConnectorEvent.text("n", "x\ud800", instance_key="k").message["text"] == f"x{FFFD}"


def test_messages_never_hold_a_lone_surrogate() -> None:
    message = Message.user("a\udcff")
    assert message.text == f"a{FFFD}"
    Message.from_dict(message.to_dict())
    json.dumps(message.to_dict(), ensure_ascii=False).encode("utf-8")


def test_an_extension_state_with_a_lone_surrogate_is_saved(state_root: Path) -> None:
    from goondan.workspace import InstanceStore

    with InstanceStore.open(state_root, "ws", "agent", "key") as store:
        assert store.save_extension_state("notes", {"last": "seen \udcff"}) is True
        assert store.load_extension_state("notes") == {"last": f"seen {FFFD}"}


def test_a_connector_event_built_directly_is_sanitised_too() -> None:
    event = ConnectorEvent(
        name="n",
        instance_key="k\udcff",
        message={"type": "text", "text": "t\ud800"},
        properties={"p": "\udc80"},
    )
    assert event.instance_key == f"k{FFFD}" and event_text(event) == f"t{FFFD}"
    assert event.properties == {"p": FFFD}
    json.dumps(event.to_dict(), ensure_ascii=False).encode("utf-8")


_json_trees = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(
        alphabet=st.characters(min_codepoint=0, max_codepoint=0xFFFF, exclude_categories=[]),
        max_size=6,
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(
                alphabet=st.characters(
                    min_codepoint=0, max_codepoint=0xFFFF, exclude_categories=[]
                ),
                max_size=4,
            ),
            inner,
            max_size=3,
        )
    ),
    max_leaves=10,
)


@given(_json_trees)
def test_clean_json_fast_path_agrees_with_the_walk(value: object) -> None:
    """clean_json proves a clean tree with one C-level encoding; the result is exactly what the
    Python walk gives (the same object when nothing needed cleaning)."""
    from goondan.text import _clean_json, dumps_compact

    cleaned = clean_json(value)
    walked = _clean_json(value)
    assert cleaned == walked or (cleaned != cleaned and walked != walked)
    if walked is value:
        assert cleaned is value
    dumps_compact(cleaned).encode("utf-8")  # never raises: no lone surrogate survives
    assert dumps_compact(cleaned) == json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))


def test_clean_json_keeps_values_json_cannot_encode() -> None:
    value = {"a": {1, 2}, "b": "x\udcff", (1, 2): "t"}
    assert clean_json(value) == {"a": {1, 2}, "b": "x\ufffd", (1, 2): "t"}
