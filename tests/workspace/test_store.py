"""InstanceStore: layout, durable append, fold-commit, recovery, locks, extension state.

Tests taking ``backend`` run against every storage backend (jsonl, postgres;
tests/support/backends.py). The others look at the JSONL files, locks or directories
themselves and stay JSONL-only; their behavioural twins in tests/storage/contract/
test_instances.py run on both (leftover events folded, extension state round trip, second
opener refused, metadata and stale status, replaces/removes equal the fold)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goondan.conversation import ConversationState, Message, MessageEvent, fold
from goondan.conversation.codec import encode_event, encode_message
from goondan.conversation.messages import MessageSource
from goondan.errors import InstanceLockedError, WorkspaceCorruptError, WorkspaceError
from goondan.storage.contract import InstanceStorage, StorageBackend
from goondan.types import ToolCall
from goondan.workspace import InstanceStore
from goondan.workspace.paths import collision_dir_name, instance_dir_name

WS = "proj-0123abcd"


def open_store(root: Path | StorageBackend, key: str = "slack:C1",
               agent: str = "planner") -> Any:
    """The instance in a JSONL state root (``root`` a path) or in ``root`` (a backend)."""
    if isinstance(root, Path):
        return InstanceStore.open(root, WS, agent, key)
    return root.open_instance(WS, agent, key)


def run_turn(store: InstanceStorage, state: ConversationState, events: list[MessageEvent],
             turn_id: str) -> ConversationState:
    for event in events:
        state.emit(event)
        store.append_event(event, turn_id)
    return store.commit(state)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_layout_and_metadata(state_root: Path) -> None:
    with open_store(state_root, key="slack:C01/x") as store:
        store.load()
        directory = state_root / "workspaces" / WS / "instances" / "planner:slack:C01-x"
        assert store.paths.dir == directory
        for name in ("metadata.json", "messages/base.jsonl", "messages/events.jsonl", "extensions"):
            assert (directory / name).exists()
        meta = json.loads((directory / "metadata.json").read_text())
        assert meta["agentName"] == "planner" and meta["instanceKey"] == "slack:C01/x"
        assert meta["status"] == "idle" and meta["createdAt"] == meta["updatedAt"]
        store.set_status("processing")
        assert json.loads((directory / "metadata.json").read_text())["status"] == "processing"
        store.set_status("idle")
        assert store.metadata["createdAt"] == meta["createdAt"]


def test_events_are_flushed_as_emitted_and_cleared_by_commit(state_root: Path) -> None:
    with open_store(state_root) as store:
        state = store.load()
        event = MessageEvent.append(Message.user("hi"))
        state.emit(event)
        store.append_event(event, "turn-1")
        # Another reader sees the record before the turn ends (no buffering).
        [record] = lines(store.paths.events)
        assert record["turnId"] == "turn-1" and record["type"] == "append"
        next_state = store.commit(state)
        assert store.paths.events.read_bytes() == b""
        assert [m["id"] for m in lines(store.paths.base)] == [event.message.id]  # type: ignore[union-attr]
        assert next_state.base_messages == state.next_messages and next_state.events == []


def test_append_only_turn_is_a_delta_append(state_root: Path) -> None:
    with open_store(state_root) as store:
        state = run_turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
        inode = store.paths.base.stat().st_ino
        run_turn(store, state, [MessageEvent.append(Message.user("b"))], "t2")
        assert store.paths.base.stat().st_ino == inode  # appended in place, not rewritten
        assert [m["data"]["content"] for m in lines(store.paths.base)] == ["a", "b"]  # type: ignore[index]


def test_replace_or_remove_is_an_atomic_rewrite(state_root: Path) -> None:
    with open_store(state_root) as store:
        first = Message.user("a")
        state = run_turn(store, store.load(), [MessageEvent.append(first)], "t1")
        inode = store.paths.base.stat().st_ino
        state = run_turn(store, state, [MessageEvent.remove(first.id),
                                        MessageEvent.append(Message.user("b"))], "t2")
        assert store.paths.base.stat().st_ino != inode
        assert [m["data"]["content"] for m in lines(store.paths.base)] == ["b"]  # type: ignore[index]
        assert not store.paths.base_tmp.exists() and not store.paths.base_prev.exists()


def test_reopen_returns_the_committed_history(backend: StorageBackend) -> None:
    with open_store(backend) as store:
        state = store.load()
        for turn in range(3):
            state = run_turn(
                store, state, [MessageEvent.append(Message.user(f"m{turn}"))], f"t{turn}"
            )
    with open_store(backend) as store:
        assert [m.text for m in store.load().next_messages] == ["m0", "m1", "m2"]
        assert store.recovery_diagnostics == []


def test_leftover_events_are_folded_and_tool_pairs_repaired(state_root: Path) -> None:
    with open_store(state_root) as store:
        state = store.load()
        for event in [MessageEvent.append(Message.user("run it")),
                      MessageEvent.append(Message.assistant("", [ToolCall("c1", "bash")]))]:
            state.emit(event)
            store.append_event(event, "turn-9")
    with open_store(state_root) as store:
        state = store.load()
        codes = [d.code for d in store.recovery_diagnostics]
        assert codes == ["W_WORKSPACE_RECOVERED", "W_WORKSPACE_REPAIRED"]
        assert store.recovery_diagnostics[0].extra["turnIds"] == ["turn-9"]
        assert [m.role for m in state.next_messages] == ["user", "assistant", "tool"]
        assert state.events == [] and store.paths.events.read_bytes() == b""
        output = state.next_messages[2].data["content"][0]["output"]
        assert output["value"]["code"] == "E_TURN_INTERRUPTED"
        assert len(lines(store.paths.base)) == 3


def test_interrupted_delta_commit_is_not_applied_twice(state_root: Path) -> None:
    messages = [Message.user(f"m{i}") for i in range(4)]
    with open_store(state_root) as store:
        store.load()
        store.append_events([MessageEvent.append(m) for m in messages], "t1")
        # Simulate a crash after half of the delta reached base.jsonl and the rest was torn.
        partial = (
            b"".join(encode_message(m) for m in messages[:2]) + encode_message(messages[2])[:10]
        )
        store.paths.base.write_bytes(partial)
    with open_store(state_root) as store:
        state = store.load()
        assert [m.text for m in state.next_messages] == ["m0", "m1", "m2", "m3"]
        codes = [d.code for d in store.recovery_diagnostics]
        assert codes == ["W_WORKSPACE_TORN_LINE", "W_WORKSPACE_RECOVERED"]
        assert store.recovery_diagnostics[1].extra["alreadyCommitted"] == 2
        assert [m["data"]["content"] for m in lines(store.paths.base)] == ["m0", "m1", "m2", "m3"]  # type: ignore[index]


def test_interrupted_rewrite_after_rename_discards_the_events(state_root: Path) -> None:
    with open_store(state_root) as store:
        keep, drop = Message.user("keep"), Message.user("drop")
        state = run_turn(
            store, store.load(), [MessageEvent.append(keep), MessageEvent.append(drop)], "t1"
        )
        events = [MessageEvent.remove(drop.id), MessageEvent.append(Message.user("new"))]
        for event in events:
            state.emit(event)
            store.append_event(event, "t2")
        # Crash between the rename and clearing events: prev link exists, base already new.
        os.link(store.paths.base, store.paths.base_prev)
        store.paths.base.unlink()
        store.paths.base.write_bytes(b"".join(encode_message(m) for m in state.next_messages))
    with open_store(state_root) as store:
        assert [m.text for m in store.load().next_messages] == ["keep", "new"]
        assert [d.code for d in store.recovery_diagnostics] == ["W_WORKSPACE_COMMIT_COMPLETED"]
        assert not store.paths.base_prev.exists()


def test_interrupted_rewrite_before_rename_replays_the_events(state_root: Path) -> None:
    with open_store(state_root) as store:
        first = Message.user("a")
        state = run_turn(store, store.load(), [MessageEvent.append(first)], "t1")
        event = MessageEvent.replace(first.id, Message.user("b"))
        state.emit(event)
        store.append_event(event, "t2")
        os.link(store.paths.base, store.paths.base_prev)  # same inode: rename never happened
        store.paths.base_tmp.write_bytes(b"half a file")
    with open_store(state_root) as store:
        assert [m.text for m in store.load().next_messages] == ["b"]
        assert not store.paths.base_tmp.exists()


def test_torn_events_tail_is_dropped(state_root: Path) -> None:
    with open_store(state_root) as store:
        store.load()
        good = MessageEvent.append(Message.user("ok"))
        store.append_event(good, "t1")
        with store.paths.events.open("ab") as handle:
            handle.write(encode_event(MessageEvent.append(Message.user("torn")), "t1")[:25])
    with open_store(state_root) as store:
        assert [m.text for m in store.load().next_messages] == ["ok"]
        assert store.recovery_diagnostics[0].code == "W_WORKSPACE_TORN_LINE"


def test_corrupt_line_stops_with_file_and_line(state_root: Path) -> None:
    with open_store(state_root) as store:
        run_turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
        store.paths.base.write_bytes(b"not json\n" + store.paths.base.read_bytes())
    with open_store(state_root) as store, pytest.raises(WorkspaceCorruptError) as info:
        store.load()
    assert info.value.location == f"{store.paths.base}:1"


def test_missing_message_files_are_recreated(state_root: Path) -> None:
    with open_store(state_root) as store:
        run_turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
    (store.paths.events).unlink()
    with open_store(state_root) as store:
        assert [m.text for m in store.load().next_messages] == ["a"]


def test_second_opener_gets_instance_locked_with_pid(state_root: Path) -> None:
    with open_store(state_root):
        with pytest.raises(InstanceLockedError) as info:
            open_store(state_root)
        assert info.value.pid == os.getpid() and info.value.exit_code == 3
    open_store(state_root).close()  # released on close


def test_lock_held_by_another_process_names_its_pid(state_root: Path) -> None:
    with open_store(state_root) as store:
        lock_path = store.paths.lock
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(lock_path)!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode())\n"
        "print('locked', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        with pytest.raises(InstanceLockedError) as info:
            open_store(state_root)
        assert info.value.pid == child.pid and str(child.pid) in info.value.message
    finally:
        child.communicate("")
    open_store(state_root).close()


def test_create_false_on_a_missing_instance(backend: StorageBackend) -> None:
    with pytest.raises(WorkspaceError) as info:
        backend.open_instance(WS, "planner", "nope", create=False)
    assert info.value.code == "E_WORKSPACE_INSTANCE_NOT_FOUND"


def test_sanitisation_collision_gets_its_own_directory(state_root: Path) -> None:
    with open_store(state_root, key="a/b") as first:
        run_turn(first, first.load(), [MessageEvent.append(Message.user("slash"))], "t")
    with open_store(state_root, key="a.b") as second:
        run_turn(second, second.load(), [MessageEvent.append(Message.user("dot"))], "t")
        assert second.paths.dir.name == collision_dir_name("planner", "a.b")
    with open_store(state_root, key="a/b") as again:
        assert again.paths.dir.name == instance_dir_name("planner", "a/b")
        assert [m.text for m in again.load().next_messages] == ["slash"]


def test_extension_state_round_trip_and_skip_unchanged(state_root: Path) -> None:
    with open_store(state_root) as store:
        assert store.load_extension_state("memory") is None
        assert store.save_extension_state("memory", {"facts": ["tea"]}) is True
        assert store.save_extension_state("memory", {"facts": ["tea"]}) is False
        assert json.loads(store.paths.extension("memory").read_text()) == {"facts": ["tea"]}
        with pytest.raises(WorkspaceError):
            store.save_extension_state("memory", {"bad": object()})
    with open_store(state_root) as store:
        assert store.load_extension_state("memory") == {"facts": ["tea"]}
        assert store.paths.extension("../evil").parent == store.paths.extensions_dir


def test_permission_denied_is_a_workspace_error(state_root: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores permissions")
    locked_root = state_root / "ro"
    locked_root.mkdir()
    locked_root.chmod(0o500)
    try:
        with pytest.raises(WorkspaceError) as info:
            open_store(locked_root)
        assert info.value.code == "E_WORKSPACE_PERMISSION"
    finally:
        locked_root.chmod(0o700)


def test_closed_store_refuses_writes(backend: StorageBackend) -> None:
    store = open_store(backend)
    store.load()
    store.close()
    store.close()
    with pytest.raises(WorkspaceError, match="closed"):
        store.append_event(MessageEvent.truncate(), "t")


def test_status_is_written_unsynced_and_a_stale_processing_is_reset_at_open(
    state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(state_root) as store:
        store.load()
        synced: list[int] = []
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
        store.set_status("processing")
        assert synced == []  # advisory: no fsync on the per-turn path
        monkeypatch.undo()
    # The holder died mid-turn (the file still says processing); the next opener holds the lock.
    assert json.loads(store.paths.metadata.read_text())["status"] == "processing"
    with open_store(state_root) as store:
        store.load()
        assert store.status == "idle"
        assert json.loads(store.paths.metadata.read_text())["status"] == "idle"


@pytest.mark.parametrize("content", [b"", b"\x00" * 180])
def test_metadata_emptied_by_a_power_loss_is_rebuilt(state_root: Path, content: bytes) -> None:
    with open_store(state_root) as store:
        run_turn(store, store.load(), [MessageEvent.append(Message.user("kept"))], "t1")
        store.paths.metadata.write_bytes(content)
    with open_store(state_root) as store:
        state = store.load()
        assert [m.text for m in state.next_messages] == ["kept"]
        assert [d.code for d in store.recovery_diagnostics] == ["W_WORKSPACE_METADATA_REBUILT"]
        meta = json.loads(store.paths.metadata.read_text())
        assert meta["agentName"] == "planner" and meta["instanceKey"] == "slack:C1"


def test_each_committed_state_offers_the_llm_view_of_its_messages(
    backend: StorageBackend,
) -> None:
    # ConversationState keeps a second list of the messages' data dicts, handed from commit to
    # the next Turn's state; it must never drift from next_messages across commits or reloads.
    with open_store(backend) as store:
        state = store.load()
        first, second = Message.user("a"), Message.user("b")
        turns = [
            [MessageEvent.append(first), MessageEvent.append(second)],  # delta append
            [MessageEvent.replace(first.id, Message.user("a2"))],  # rewrite
            [MessageEvent.remove(second.id), MessageEvent.append(Message.user("c"))],
            [],  # nothing to fold
            [MessageEvent.truncate(), MessageEvent.append(Message.user("d"))],
        ]
        for number, events in enumerate(turns):
            state = run_turn(store, state, events, f"t{number}")
            view = state.to_llm_messages()
            assert all(d is m.data for d, m in zip(view, state.next_messages, strict=True))
            assert store.load().to_llm_messages() == view
        assert [d["content"] for d in view] == ["d"]
    with open_store(backend) as store:
        assert store.load().to_llm_messages() == [{"role": "user", "content": "d"}]


# -- adversarial review: failures mid-commit, mixed turns, collisions, lock after SIGKILL --------


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """A real partial write: the kernel writes up to ``limit`` bytes of a file, then EFBIG."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_delta_append_that_fails_half_way_is_undone(state_root: Path) -> None:
    with open_store(state_root) as store:
        state = run_turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
        big = [MessageEvent.append(Message.user("x" * 5000)) for _ in range(3)]
        for event in big:
            state.emit(event)
        store.append_events(big, "t2")
        with file_size_limit(store.paths.base.stat().st_size + 7000), \
                pytest.raises(WorkspaceError) as info:
            store.commit(state)  # the write stops inside the second new line
        assert info.value.code == "E_WORKSPACE_IO"
        assert [m["data"]["content"] for m in lines(store.paths.base)] == ["a"]  # type: ignore[index]
        # The turn's state is kept; the next turn goes on and commits both.
        tail = MessageEvent.append(Message.user("b"))
        state.emit(tail)
        store.append_event(tail, "t3")
    with open_store(state_root) as store:  # crash before that commit: nothing lost or doubled
        texts = [m.text for m in store.load().next_messages]
        assert texts == ["a", "x" * 5000, "x" * 5000, "x" * 5000, "b"]


def test_an_event_append_that_fails_half_way_is_undone(state_root: Path) -> None:
    with open_store(state_root) as store:
        state = store.load()
        store.append_event(MessageEvent.append(Message.user("kept")), "t1")
        with (
            file_size_limit(store.paths.events.stat().st_size + 100),
            pytest.raises(WorkspaceError),
        ):
            store.append_event(MessageEvent.append(Message.user("y" * 1000)), "t1")
        store.append_event(MessageEvent.append(Message.user("next")), "t1")
        del state
    with open_store(state_root) as store:  # no corrupt middle line
        assert [m.text for m in store.load().next_messages] == ["kept", "next"]
        assert store.recovery_diagnostics[0].code == "W_WORKSPACE_RECOVERED"


def test_events_not_cleared_by_a_commit_are_cleared_before_the_next_turn(
    state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(state_root) as store:
        state = store.load()
        first = Message.user("a")
        turn1 = [MessageEvent.append(first), MessageEvent.replace(first.id, Message.user("a2"))]
        for event in turn1:
            state.emit(event)
            store.append_event(event, "t1")
        real = os.ftruncate

        def failing(fd: int, size: int) -> None:
            monkeypatch.setattr(os, "ftruncate", real)
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "ftruncate", failing)
        with pytest.raises(WorkspaceError):
            store.commit(state)  # base rewritten, events not cleared
        # The runtime keeps its state and runs the next turn; its events must not join turn 1's.
        event = MessageEvent.append(Message.user("b"))
        state.emit(event)
        store.append_event(event, "t2")
        assert [r["turnId"] for r in lines(store.paths.events)] == ["t2"]
    with open_store(state_root) as store:  # crash before the commit of turn 2
        assert [m.text for m in store.load().next_messages] == ["a2", "b"]


def test_events_of_two_turns_after_a_committed_delta_are_exact(state_root: Path) -> None:
    # events.jsonl holding a delta-committed turn followed by another turn (older writers could
    # leave this): the committed appends are recognised by id, the rest is applied once.
    a, b = Message.user("a"), Message.user("b")
    with open_store(state_root) as store:
        run_turn(store, store.load(), [MessageEvent.append(a), MessageEvent.append(b)], "t1")
        turn2 = [
            MessageEvent.replace(a.id, Message.user("a2")),
            MessageEvent.append(Message.user("c")),
        ]
        store.paths.events.write_bytes(
            encode_event(MessageEvent.append(a), "t1") + encode_event(MessageEvent.append(b), "t1")
            + b"".join(encode_event(e, "t2") for e in turn2))
    with open_store(state_root) as store:
        assert [m.text for m in store.load().next_messages] == ["a2", "b", "c"]
        assert store.recovery_diagnostics[0].extra["turnIds"] == ["t1", "t2"]


def test_collision_directory_is_found_after_the_plain_name_is_freed(state_root: Path) -> None:
    with open_store(state_root, key="a/b") as first:
        first.load()
    with open_store(state_root, key="a?b") as second:
        run_turn(second, second.load(), [MessageEvent.append(Message.user("mine"))], "t")
        assert second.paths.dir.name == collision_dir_name("planner", "a?b")
    shutil.rmtree(first.paths.dir)  # `goondan instance delete a/b`
    with open_store(state_root, key="a?b") as again:
        assert again.paths.dir.name == collision_dir_name("planner", "a?b")
        assert [m.text for m in again.load().next_messages] == ["mine"]


def test_lock_is_released_when_the_holder_is_killed(state_root: Path) -> None:
    code = (
        "import sys\n"
        "from goondan.workspace import InstanceStore\n"
        f"s = InstanceStore.open({str(state_root)!r}, {WS!r}, 'planner', 'slack:C1')\n"
        "s.load(); print('open', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
        with pytest.raises(InstanceLockedError) as info:
            open_store(state_root)
        assert info.value.pid == child.pid
    finally:
        child.kill()
        child.communicate()
    with open_store(state_root) as store:  # no stale lock after SIGKILL
        store.load()
        assert store.recovery_diagnostics == []


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base_ids=st.lists(st.sampled_from("abcdef"), max_size=6),
    turns=st.lists(
        st.lists(
            st.one_of(
                st.builds(
                    lambda i: MessageEvent.append(
                        Message(
                            id=i, data={"role": "user", "content": i}, source=MessageSource("user")
                        )
                    ),
                    st.sampled_from("abcdefgh"),
                ),
                st.builds(
                    lambda t: MessageEvent.replace(
                        t,
                        Message(
                            id=t,
                            data={"role": "user", "content": "R"},
                            source=MessageSource("user"),
                        ),
                    ),
                    st.sampled_from("abcdefgh"),
                ),
                st.builds(MessageEvent.remove, st.sampled_from("abcdefgh")),
                st.just(None).map(lambda _: MessageEvent.truncate()),
            ),
            max_size=5,
        ),
        max_size=4,
    ),
)
def test_store_commits_equal_the_naive_fold_even_with_duplicate_ids(
    state_root: Path, base_ids: list[str], turns: list[list[MessageEvent]]
) -> None:
    # base.jsonl as another writer (the reference runtime, a hand edit) may leave it: ids repeat.
    base = [Message(id=i, data={"role": "user", "content": i}, source=MessageSource("user"))
            for i in base_ids]
    with open_store(state_root, key="prop") as store:
        store.paths.base.write_bytes(b"".join(encode_message(m) for m in base))
        store.paths.events.write_bytes(b"")
    with open_store(state_root, key="prop") as store:
        state = store.load()
        expected = list(base)
        for number, events in enumerate(turns):
            state = run_turn(store, state, events, f"t{number}")
            expected = fold(expected, events)[0]
            assert [m.to_dict() for m in state.next_messages] == [m.to_dict() for m in expected]
    with open_store(state_root, key="prop") as store:
        again = store.load().next_messages
        assert [m.to_dict() for m in again] == [m.to_dict() for m in expected]
