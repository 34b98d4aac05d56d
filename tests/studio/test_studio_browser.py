"""Issue 35 acceptance in a real headless chromium: the studio page over real swarms.

One state root for the module: the delegation example run once (a coordinator turn that asks
the worker through agents__request: one trace across two agent processes), and a running swarm
of the approvals example whose file tool also has a ``wait`` export that returns only when a
file the test creates appears. The studio server runs in this process
(:class:`goondan.studio.server.StudioServer`); the browser is the system chromium
(tests/studio/conftest.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from goondan.studio.server import StudioServer
from tests.studio.conftest import shoot
from tests.support.connector_e2e import goondan_run, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
DURATION = re.compile(r"\d+(\.\d+)? (ms|s)")

# The approvals example's tool plus `wait`: returns once work/<path> exists (the test creates it).
WAIT_EXPORT = '''

def wait(ctx: Any, args: dict[str, Any]) -> str:
    import time

    path = _path(ctx, args["path"])
    deadline = time.monotonic() + 60
    while not path.exists():
        if time.monotonic() > deadline:
            return f"gave up waiting for {args['path']}"
        time.sleep(0.02)
    return f"found {args['path']}"


handlers["wait"] = wait
'''
WAIT_RULE = {
    "when": r"(?i)\bwait for (\S+)",
    "steps": [{"toolCalls": [{"name": "files__wait", "args": {"path": "go.txt"}}]},
              {"text": "Waited: {{toolResult}}"}],
}


def _goondan(state_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goondan", "--state-root", str(state_root),
                           *args], capture_output=True, text=True, timeout=60, check=False,
                          cwd=REPO)


def _approvals_bundle(tmp: Path) -> Path:
    bundle = tmp / "approvals"
    shutil.copytree(REPO / "examples" / "approvals", bundle)
    docs = list(yaml.safe_load_all((bundle / "goondan.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "Tool":
            doc["spec"]["exports"].append({
                "name": "wait", "description": "Wait until a file exists.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            })
    (bundle / "goondan.yaml").write_text(yaml.safe_dump_all(docs))
    tool = bundle / "tools" / "files.py"
    tool.write_text(tool.read_text() + WAIT_EXPORT)
    script = yaml.safe_load((bundle / "demo-script.yaml").read_text())
    script["script"].insert(0, WAIT_RULE)
    (bundle / "demo-script.yaml").write_text(yaml.safe_dump(script))
    (bundle / "work").mkdir(exist_ok=True)
    (bundle / "work" / "old.txt").write_text("old")
    return bundle


class World:
    """The module's state root, its running swarm and the studio over it."""

    def __init__(self, state_root: Path, bundle: Path, studio: StudioServer,
                 delegation_trace: str) -> None:
        self.state_root, self.bundle, self.studio = state_root, bundle, studio
        self.delegation_trace = delegation_trace  # as `goondan inspect trace --last` printed it

    def url(self, path: str) -> str:
        return self.studio.url.rstrip("/") + path

    def send(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = _goondan(self.state_root, "send", "-b", str(self.bundle), *args)
        assert done.returncode == 0, done.stderr
        return done


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("studio-world")
    state_root = tmp / "state"
    delegation = _goondan(state_root, "run", "--bundle", str(REPO / "examples" / "delegation"),
                          "--input", "What is 17 * 23?")
    assert delegation.returncode == 0 and "391" in delegation.stdout, delegation.stderr
    listed = _goondan(state_root, "inspect", "trace", "--last", "--json")
    trace_id = json.loads(listed.stdout)["traceId"]
    bundle = _approvals_bundle(tmp)
    with goondan_run(bundle, state_root, {}), StudioServer(state_root).start() as studio:
        try:
            world = World(state_root, bundle, studio, trace_id)
            world.send("hello")  # the swarm's instance exists for every test, in any order
            yield world
        finally:
            _goondan(state_root, "stop", "-b", str(bundle))


def _rows(page: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = page.eval_on_selector_all(".wf-row", """rows => rows.map(r => ({
        kind: r.dataset.kind, agent: r.dataset.agent, depth: Number(r.dataset.depth),
        name: r.querySelector('.name').textContent, facts: r.querySelector('.wf-meta').textContent,
        hidden: r.offsetParent === null}))""")
    return rows


def test_a_trace_id_from_inspect_trace_opens_the_delegation_waterfall(
    world: World, page: Any, browser: Any
) -> None:
    trace_id = world.delegation_trace
    page.goto(world.url("/traces"))
    page.get_by_label("Open trace").fill(trace_id[:12])
    page.get_by_label("Open trace").press("Enter")
    page.wait_for_selector(".wf-row[data-agent='worker']")
    assert page.evaluate("location.pathname") == f"/traces/{trace_id[:12]}"
    rows = _rows(page)
    kinds = [(r["kind"], r["agent"], r["name"]) for r in rows]
    # the coordinator's turn is the root; its agents__request call holds the request to the
    # worker, which holds the worker's own turn (another process), all with their durations
    assert rows[0]["kind"] == "turn" and rows[0]["agent"] == "coordinator" and rows[0]["depth"] == 0
    tool = next(i for i, r in enumerate(rows) if r["kind"] == "tool")
    assert rows[tool]["name"] == "agents__request" and rows[tool]["agent"] == "coordinator"
    request, worker_turn = rows[tool + 1], rows[tool + 2]
    assert (request["kind"], request["depth"]) == ("request", rows[tool]["depth"] + 1), kinds
    assert (worker_turn["kind"], worker_turn["agent"]) == ("turn", "worker"), kinds
    assert worker_turn["depth"] == request["depth"] + 1
    for row in (rows[0], rows[tool], request, worker_turn):
        assert DURATION.search(row["facts"]), row
    assert sum(r["kind"] == "llm" for r in rows) == 3
    shoot(page, "trace")

    # keyboard: the root's toggle collapses every descendant and expands them again
    toggle = page.locator(".wf-row").first.get_by_role("button")
    toggle.focus()
    page.keyboard.press("Enter")
    assert [r["hidden"] for r in _rows(page)] == [False] + [True] * (len(rows) - 1)
    page.keyboard.press("Enter")
    assert not any(r["hidden"] for r in _rows(page))

    errors: list[str] = []
    from tests.studio.conftest import new_page

    dark = new_page(browser, errors, color_scheme="dark")
    try:
        dark.goto(world.url(f"/traces/{trace_id}"))
        dark.wait_for_selector(".wf-row[data-agent='worker']")
        background = dark.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(22, 24, 27)"  # the dark palette, from prefers-color-scheme
        shoot(dark, "trace-dark")
    finally:
        dark.context.close()
    assert errors == []


def test_an_unknown_trace_id_shows_the_error_on_the_page(world: World, page: Any) -> None:
    page.goto(world.url("/traces/0123456789abcdef"))
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "E_STUDIO_NOT_FOUND" in alert.text_content()


def test_an_open_conversation_shows_new_messages_of_the_running_turn_without_reloading(
    world: World, page: Any
) -> None:
    hostile = "<img src=x onerror=window.__xss=1>"
    world.send("--no-wait", f"wait for go.txt {hostile}")
    page.goto(world.url("/"))
    page.get_by_role("link", name="default").first.click()
    page.wait_for_selector(".msg-user")
    page.evaluate("window.__sameDocument = true")
    # the turn runs: its tool call waits for go.txt (shown from the fetch or from the stream)
    call = page.locator("details.call", has_text="files__wait")
    call.wait_for()
    assert "waiting for result" in call.text_content()
    assert page.locator(".msg-pending").count() >= 1
    (world.bundle / "work" / "go.txt").write_text("go")
    answer = page.locator(".msg-assistant .msg-text", has_text="Waited: found go.txt")
    answer.wait_for()
    assert page.evaluate("window.__sameDocument") is True  # no reload: the stream brought it
    page.wait_for_function("() => !document.querySelector('.msg-pending')")
    assert "done" in call.text_content()
    call.locator("summary").click()
    assert "found go.txt" in call.locator(".call-result").text_content()
    # message text is text: the markup shows as typed and never runs
    assert hostile in page.locator(".msg-user").last.text_content()
    assert page.locator(".messages img").count() == 0
    assert page.evaluate("window.__xss") is None
    shoot(page, "conversation")


def test_approving_a_pending_call_by_clicking_finishes_the_parked_turn(
    world: World, page: Any
) -> None:
    page.goto(world.url("/approvals"))
    page.locator(".approvals .empty").wait_for()
    page.evaluate("window.__sameDocument = true")
    parked = json.loads(world.send("delete old.txt", "--json").stdout)
    assert parked["status"] == "waitingForApproval"
    [pending] = parked["approvals"]
    # the open page lists the new request by itself (the overview stream's pending count)
    card = page.locator(f"[data-approval-id='{pending['id']}']")
    card.wait_for()
    assert page.evaluate("window.__sameDocument") is True
    assert "files__delete" in card.text_content() and '"path": "old.txt"' in card.text_content()
    shoot(page, "approvals")
    page.get_by_role("link", name="Swarms").click()
    page.locator(".swarm", has_text="1 pending approval").wait_for()
    shoot(page, "swarms")
    page.get_by_role("link", name="1 pending approval").click()
    card.wait_for()
    card.get_by_label("Reason (optional)").fill("fine by me")
    card.get_by_role("button", name="Approve").click()
    card.locator(".outcome .status-approved").wait_for()
    assert "studio:" in card.locator(".outcome").text_content()
    wait_for(lambda: not (world.bundle / "work" / "old.txt").exists(), 30, "the tool to run")
    # the turn finishes: its final answer is in the conversation
    page.get_by_role("link", name="Conversations").click()
    page.get_by_role("link", name="default").first.click()
    page.locator(".msg-assistant .msg-text", has_text="Done: deleted old.txt").wait_for()
    page.get_by_role("link", name="Approvals").first.click()
    page.locator(".approvals .empty").wait_for()
    assert "approved" in page.locator("table").text_content()
    page.locator("#approval-count").wait_for(state="hidden")  # the live count went to 0


def test_denying_with_a_reason_by_keyboard_ends_the_turn_with_the_denial(
    world: World, page: Any
) -> None:
    parked = json.loads(world.send("delete old.txt", "--json").stdout)
    [pending] = parked["approvals"]
    page.goto(world.url("/approvals"))
    card = page.locator(f"[data-approval-id='{pending['id']}']")
    reason = card.get_by_label("Reason (optional)")
    reason.fill("not today")
    # another request arrives while the reason is being typed: it shows up, the typing survives
    other = json.loads(world.send("-k", "second", "delete old.txt", "--json").stdout)
    [second] = other["approvals"]
    page.locator(f"[data-approval-id='{second['id']}']").wait_for()
    assert reason.input_value() == "not today"
    assert page.evaluate("document.activeElement.id") == f"reason-{pending['id']}"
    reason.press("Tab")
    page.keyboard.press("Tab")  # past Approve, onto Deny
    assert page.evaluate("document.activeElement.textContent") == "Deny"
    page.keyboard.press("Enter")
    card.locator(".outcome .status-denied").wait_for()
    page.locator(f"[data-approval-id='{second['id']}']").get_by_role("button", name="Deny").click()
    page.get_by_role("link", name="Conversations").click()
    page.get_by_role("link", name="default", exact=True).click()
    page.locator(".msg-assistant .msg-text", has_text="E_APPROVAL_DENIED").wait_for()
    page.get_by_role("link", name="Approvals").first.click()
    decided = page.locator("tbody tr", has_text="not today")
    assert "denied" in decided.text_content()


def test_messages_written_between_the_page_load_and_the_stream_start_still_appear(
    world: World, page: Any
) -> None:
    held: list[Any] = []
    # the conversation stream is held back until the test lets it through
    page.route(re.compile(r"/api/conversations/.*/stream(\?|$)"),
               lambda route: held.append(route))
    page.goto(world.url("/"))
    page.get_by_role("link", name="default").first.click()
    page.wait_for_selector(".msg-user")
    deadline = time.monotonic() + 30
    while not held:  # Playwright dispatches the held request while it answers a call
        assert time.monotonic() < deadline, "the page never opened its conversation stream"
        page.evaluate("0")
    world.send("hello studio")  # a whole turn, committed while the page has no stream yet
    held[0].continue_()
    page.locator(".msg-user .msg-text", has_text="hello studio").wait_for()
    page.locator(".msg-assistant .msg-text", has_text="Try").last.wait_for()
    texts = page.locator("article.msg .msg-text").all_text_contents()
    assert texts.index(next(t for t in texts if "hello studio" in t)) == len(texts) - 2


def test_every_page_is_complete_without_its_live_streams(world: World, page: Any) -> None:
    page.route("**/stream*", lambda route: route.abort())  # no server-sent events at all
    page.goto(world.url("/"))
    page.locator(".swarm").wait_for()
    assert page.locator(".workspace").count() == 2
    page.get_by_role("link", name="delegation").first.click()
    page.locator(".msg-assistant", has_text="The worker says: 17 * 23 = 391").wait_for()
    page.get_by_role("link", name="Traces").click()
    page.locator("tr", has_text="coordinator, worker").get_by_role("link").click()
    page.locator(".wf-row[data-agent='worker'][data-kind='turn']").wait_for()
    page.get_by_role("link", name="Approvals").first.click()
    page.get_by_role("heading", name="Decided").wait_for()
    assert page.locator("#live").text_content() == "offline"


def test_phone_width_pages_fit_without_horizontal_scrolling(world: World, browser: Any) -> None:
    from tests.studio.conftest import new_page

    errors: list[str] = []
    phone = new_page(browser, errors, viewport={"width": 390, "height": 844})
    try:
        phone.goto(world.url("/traces"))
        trace = phone.locator("table a").first.get_attribute("href")
        phone.goto(world.url("/"))
        conversation = phone.locator(".workspace a").first.get_attribute("href")
        for path, ready in (("/", ".workspace"), ("/traces", "table"), ("/approvals", "h1"),
                            (trace, ".wf-row"), (conversation, ".msg")):
            phone.goto(world.url(path))
            phone.wait_for_selector(ready)
            overflow = phone.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, (path, overflow)
    finally:
        phone.context.close()
    assert errors == []


def test_a_token_in_the_page_address_reaches_every_request_and_link(
    world: World, page: Any
) -> None:
    with StudioServer(world.state_root, token="s3cret-studio-token").start() as guarded:
        base = guarded.url.rstrip("/")
        page.goto(base + "/traces")
        assert "E_STUDIO_UNAUTHORIZED" in page.get_by_role("alert").text_content()
        page.goto(base + "/?token=s3cret-studio-token")
        page.locator(".workspace").first.wait_for()
        page.locator("#live.on").wait_for()  # the overview stream carries the token too
        page.get_by_role("link", name="Traces").click()
        page.locator("table").wait_for()
        assert page.url.endswith("/traces?token=s3cret-studio-token")
        page.locator("table a").first.click()
        page.locator(".wf-row").first.wait_for()
        assert "token=s3cret-studio-token" in page.url
        page.reload()  # the address alone opens the page again
        page.locator(".wf-row").first.wait_for()
