"""Issue 35: a 10,000-message conversation and a 2,000-span trace render in the browser in
under a second — measured (window.studioTimings, set by app.js: the data's fetch, building and
laying out the DOM, the first frame drawn) and printed, not asserted; what is asserted is that
the page shows all of it (the conversation: its latest 2,000 messages, the earlier ones behind
"Show earlier"; the trace: every span, the failed ones highlighted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation.codec import encode_message
from goondan.conversation.messages import Message, MessageSource
from goondan.studio.server import StudioServer
from goondan.workspace.store import InstanceStore
from tests.support.studio_data import build_large_state

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


Large = tuple[StudioServer, dict[str, Any]]


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Large]:
    facts = build_large_state(tmp_path_factory.mktemp("studio-large"))
    with StudioServer(Path(facts["stateRoot"])).start() as studio:
        yield studio, facts


def _timing(page: Any, kind: str) -> dict[str, Any]:
    page.wait_for_function(
        "kind => window.studioTimings.some(t => t.page === kind && t.paintedMs !== null)",
        arg=kind)
    found: dict[str, Any] = page.evaluate(
        "kind => window.studioTimings.find(t => t.page === kind)", kind)
    return found


def _report(capsys: pytest.CaptureFixture[str], what: str, timing: dict[str, Any]) -> None:
    with capsys.disabled():
        print(f"\n[studio render] {what}: fetch {timing['fetchMs']:.0f} ms, build+layout "
              f"{timing['renderMs']:.0f} ms, first frame {timing['paintedMs']:.0f} ms "
              "after the data arrived")


def test_a_10000_message_conversation_renders_its_latest_messages_with_earlier_on_demand(
    large: Large, page: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    studio, facts = large
    page.goto(studio.url.rstrip("/") + facts["href"])
    timing = _timing(page, "conversation")
    _report(capsys, f"{facts['messages']} messages", timing)
    assert timing["count"] == facts["messages"]
    assert page.locator(".msg-count").text_content() == "10000 messages"
    # 10,000 messages = 2,500 × (user, assistant + call, tool result, answer): the last 2,000
    # are on the page, their results inside their calls
    assert page.locator("article.msg").count() == 1500
    assert page.locator("details.call").count() == 500
    assert "2499 * 7 = 17493" in page.locator("article.msg").last.text_content()
    earlier = page.get_by_role("button", name="Show 2000 earlier messages (of 8000)")
    earlier.click()
    assert page.locator("article.msg").count() == 3000
    assert page.locator(".show-earlier").text_content().startswith("Show 2000 earlier")

    page.get_by_label("Search").fill("question 1234:")
    page.get_by_label("Search").press("Enter")
    page.locator(".msg-count", has_text="1 message matching “question 1234:”").wait_for()
    assert page.locator("article.msg").count() == 1


def test_a_2000_span_trace_renders_every_span_with_the_failures_highlighted(
    large: Large, page: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    studio, facts = large
    page.goto(studio.url.rstrip("/") + "/traces/" + facts["traceId"])
    timing = _timing(page, "trace")
    _report(capsys, f"{facts['spans']} spans", timing)
    assert timing["count"] == facts["spans"]
    assert page.locator(".wf-row").count() == facts["spans"]
    failed = page.locator(".wf-row.error")
    assert failed.count() > 0
    assert "E_TOOL_FAILED: division by zero" in failed.first.text_content()
    assert page.locator(".wf-row[data-agent='worker'][data-kind='turn']").count() > 0


def test_system_extension_and_failed_tool_messages_are_told_apart(
    large: Large, page: Any
) -> None:
    studio, facts = large
    root = Path(facts["stateRoot"])
    messages = [
        Message.system("You are terse."),
        Message.system("Remembered: the user likes tea.", extension="memory"),
        Message.user("divide 1 by 0"),
        Message.create("assistant", [{"type": "tool-call", "toolCallId": "c1",
                                      "toolName": "calc__divide", "input": {"a": 1, "b": 0}}],
                       source=MessageSource("assistant")),
        Message.create("tool", [{"type": "tool-result", "toolCallId": "c1",
                                 "toolName": "calc__divide",
                                 "output": {"type": "error-json",
                                            "value": {"code": "E_TOOL", "message": "by zero"}}}],
                       source=MessageSource("tool", tool_call_id="c1", tool_name="calc__divide")),
        Message.assistant("I cannot divide by zero."),
    ]
    with InstanceStore.open(root, facts["workspaceId"], "helper", "kinds", fsync=False) as store:
        store.paths.base.write_bytes(b"".join(encode_message(m) for m in messages))
    page.goto(studio.url.rstrip("/") + f"/conversations/{facts['workspaceId']}/helper/kinds")
    page.locator(".msg-count", has_text="6 messages").wait_for()
    assert page.locator(".msg-system").text_content().endswith("You are terse.")
    extension = page.locator(".msg-extension")
    assert "memory" in extension.locator(".msg-source").text_content()
    assert page.locator(".msg-system, .msg-extension").count() == 2
    call = page.locator("details.call")
    assert call.get_attribute("class") == "call error"
    call.locator("summary").press("Enter")  # a <summary> opens from the keyboard
    assert "by zero" in call.locator(".call-result").text_content()
    assert call.evaluate("d => d.open") is True
