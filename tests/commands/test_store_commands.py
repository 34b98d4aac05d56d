"""The state commands with ``--store postgresql://…`` (docs/cli.md, docs/storage.md): ``inspect``,
``fold``, ``instance``, ``approvals`` read and write a PostgreSQL store filled by real turns
(``Runtime(storage=...)`` with a scripted model) through the storage contract; a decision taken
there is seen by a swarm on that store; the URL's password is never printed."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.storage.postgres.backend import PostgresBackend
from tests.support.aio import run as run_async
from tests.support.approvals_example import approvals_bundle
from tests.support.cli_main import run
from tests.support.postgres import password_of


@contextlib.contextmanager
def opened(url: str) -> Iterator[PostgresBackend]:
    backend = PostgresBackend.open(url)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory without a bundle and a local state root of its own (no ~/.goondan)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GOONDAN_STATE_ROOT", str(tmp_path / "local-state"))
    monkeypatch.delenv("GOONDAN_STORE", raising=False)
    return tmp_path


@pytest.fixture()
def bundle(tmp_path: Path) -> Path:
    return approvals_bundle(tmp_path)


def park_a_turn(bundle: Path, url: str | None, state_root: Path | None = None) -> str:
    """A real turn that parks on an approval (on PostgreSQL at ``url``, else in the state
    root); its approval id."""
    async def main() -> str:
        model = ScriptedModel([{"toolCalls": [{"name": "files__delete",
                                               "args": {"path": "old.txt"}}]}])
        with contextlib.ExitStack() as stack:
            storage = None if url is None else stack.enter_context(opened(url))
            async with Runtime.from_bundle(bundle, storage=storage, state_root=state_root,
                                           models={"assistant": model}) as rt:
                parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
                [row] = parked.metadata["approvals"]
                return str(row["id"])

    return run_async(main())


def test_the_commands_read_a_store_filled_by_real_turns_and_a_decision_reaches_its_swarm(
    here: Path, bundle: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    password = password_of(postgres_url)
    approval = park_a_turn(bundle, postgres_url)
    seen = ""

    code, out, err = run(capsys, "instance", "list", "--store", postgres_url, "--json")
    assert code == 0, err
    [row] = json.loads(out)["instances"]
    assert (row["agentName"], row["instanceKey"], row["status"]) == (
        "assistant", "k", "waitingForApproval")
    seen += out + err

    code, out, err = run(capsys, "inspect", "workspace", "--store", postgres_url, "--json")
    assert code == 0, err
    [workspace] = json.loads(out)["workspaces"]
    [listed] = workspace["instances"]
    assert (listed["instanceKey"], listed["messages"], listed["pendingEvents"]) == ("k", 2, 0)
    assert json.loads(out)["store"] == postgres_url.replace(password, "***")
    seen += out + err

    code, out, err = run(capsys, "inspect", "instance", "k", "--store", postgres_url)
    assert code == 0, err
    assert "delete old.txt" in out and "-> call files__delete" in out
    assert "-- pending events: 0 --" in out
    seen += out + err

    code, out, err = run(capsys, "approvals", "list", "--store", postgres_url, "--json")
    assert code == 0, err
    assert [a["id"] for a in json.loads(out)] == [approval]
    code, out, err = run(capsys, "approvals", "list", "--json")  # the JSONL state root: none
    assert json.loads(out) == []

    code, out, err = run(capsys, "approvals", "approve", approval, "--store", postgres_url)
    assert code == 0, err
    assert f"{approval}: approved (applied when the swarm runs)" in out
    seen += out + err

    code, out, err = run(capsys, "fold", "k", "--store", postgres_url, "--dry-run")
    assert code == 0 and "nothing to fold" in out, out + err  # a parked turn's call stays open
    seen += out + err

    # the spans are rows of the store (the local state root has none): the parked turn's
    # tree, its tool call waiting for a decision
    code, out, err = run(capsys, "inspect", "instance", "k", "--traces", "--store", postgres_url)
    assert code == 0 and "-- traces of assistant:k: 1 --" in out, out + err
    assert err == ""
    code, out, err = run(capsys, "inspect", "trace", "--store", postgres_url)
    assert code == 0 and err == "", err
    assert "approval files__delete  waiting for a decision" in out
    parked_trace = out.split()[1]  # "trace <id>  (…)"
    code, out, err = run(capsys, "inspect", "trace", "--state-root", str(here / "empty"))
    assert code != 0 and "E_TRACE_NOT_FOUND" in err  # nothing of it under a state root
    code, out, err = run(capsys, "approvals", "deny", "apr_0", "--store", postgres_url)
    assert code == 2 and "[E_APPROVAL_NOT_FOUND]" in err
    assert password not in seen + out + err

    async def swarm_on_the_store() -> str:
        model = ScriptedModel(["deleted it after the decision"])
        with opened(postgres_url) as storage:
            async with Runtime.from_bundle(bundle, storage=storage,
                                           models={"assistant": model}) as rt:
                await rt.instance(None, "k")  # the stored decision resumes the parked turn
                for task in list(rt._resuming):
                    await task
                instance = await rt.instance(None, "k")
                return instance.messages[-1].text

    assert run_async(swarm_on_the_store()) == "deleted it after the decision"
    assert not (bundle / "work" / "old.txt").exists()
    # the decision, applied by the reopened instance, closed the wait its first opening stored
    code, out, err = run(capsys, "inspect", "trace", parked_trace[:10], "--store", postgres_url,
                         "--json", "--flat")
    assert code == 0, err
    [wait] = [s for s in json.loads(out)["spans"] if s["kind"] == "approval"]
    assert (wait["status"], wait["attributes"]["status"]) == ("ok", "approved")
    assert wait["durationMs"] is not None


def test_fold_and_delete_in_a_store(
    here: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with opened(postgres_url) as backend:
        store = backend.open_instance("ws-1", "planner", "cut")
        store.load()
        store.append_event(MessageEvent.append(Message.user("left behind")), "t1")
        store.close()
        backend.approvals("ws-1").request(agent="planner", instance_key="cut", turn_id="t1",
                                          tool_call_id="c1", tool="x__y", args={})

    code, out, err = run(capsys, "fold", "--all", "--store", postgres_url, "--dry-run")
    assert code == 0 and "planner:cut (ws-1): would fold 1 leftover event" in out, out + err
    code, out, err = run(capsys, "fold", "--all", "--store", postgres_url)
    assert code == 0 and "planner:cut (ws-1): folded 1 leftover event" in out, out + err
    code, out, _ = run(capsys, "inspect", "instance", "cut", "--store", postgres_url, "--json")
    document = json.loads(out)
    assert [m["data"]["content"] for m in document["messages"]] == ["left behind"]
    assert document["pendingEvents"] == []

    with opened(postgres_url) as backend, backend.open_instance("ws-1", "planner", "cut"):
        code, out, err = run(capsys, "instance", "delete", "cut", "--force", "--store",
                             postgres_url)
        assert code != 0 and "E_INSTANCE_LOCKED" in err  # in use: refused, even with --force
    code, out, err = run(capsys, "instance", "delete", "cut", "--force", "--store",
                         postgres_url)
    assert code == 0 and "Instance deleted: planner:cut" in out, out + err
    with opened(postgres_url) as backend:
        assert backend.workspaces() == []  # its approval went with it
    code, out, _ = run(capsys, "instance", "delete", "cut", "--force", "--store", postgres_url)
    assert code == 0 and "Instance not found: cut" in out


@pytest.mark.parametrize("argv", [
    ("inspect", "workspace"), ("inspect", "instance", "k"), ("inspect", "trace"),
    ("fold", "--all"), ("instance", "list"), ("instance", "delete", "k", "--force"),
    ("approvals", "list"), ("approvals", "approve", "apr_0"), ("approvals", "deny", "apr_0"),
    ("approvals", "cancel", "apr_0"),
])
def test_a_bad_store_is_e_store_url_with_the_password_masked(
    here: Path, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv, "--store", "mysql://u:Sup3rSecret@db/x")
    assert code == 3
    assert "[E_STORE_URL]" in err and "mysql://u:***@db/x" in err
    assert "Sup3rSecret" not in out + err and "Traceback" not in err


def test_an_unreachable_store_is_e_store_unavailable_with_the_password_masked(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://u:Sup3rSecret@127.0.0.1:{port}/db?connect_timeout=2"
    code, out, err = run(capsys, "instance", "list", "--store", url)
    assert code == 3 and "[E_STORE_UNAVAILABLE]" in err
    assert "Sup3rSecret" not in out + err


def test_a_path_as_the_store_is_the_state_root_and_the_env_is_used_without_the_option(
    here: Path, bundle: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    state = here / "elsewhere"
    approval = park_a_turn(bundle, None, state)
    code, out, _ = run(capsys, "approvals", "list", "--store", str(state), "--json")
    assert code == 0 and [a["id"] for a in json.loads(out)] == [approval]
    code, out, _ = run(capsys, "instance", "list", "--store", str(state), "--json")
    assert [r["instanceKey"] for r in json.loads(out)["instances"]] == ["k"]
    monkeypatch.setenv("GOONDAN_STORE", postgres_url)
    code, out, err = run(capsys, "instance", "list", "--json")
    assert code == 0 and json.loads(out)["instances"] == [], err  # the (empty) database
