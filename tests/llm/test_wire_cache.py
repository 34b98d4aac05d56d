"""The incremental request body equals the naive one, for every wire format (goondan/llm/wire.py).

A model adapter keeps the wire form and bytes of the messages it already sent and converts only
what is new. These property tests drive one adapter instance through random Turns — steps that
append model replies and tool results, step-middleware ``replace``/``remove``/``truncate``
events, changing system prompts, and a second conversation sharing the model — and check after
every step that :meth:`HttpModel.payload` is byte-for-byte the encoding of the naive
:meth:`HttpModel.to_wire` of the same request, and decodes to it.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goondan.conversation.messages import Message, MessageEvent, MessageSource
from goondan.conversation.state import ConversationState
from goondan.llm.base import ModelRequest, ModelSpec
from goondan.llm.provider import HttpModel
from goondan.llm.registry import create_model
from goondan.llm.wire import RawJson, encode_body, encode_json
from goondan.types import ToolCatalogItem
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider

PROVIDERS = ("openai", "openai-compatible", "anthropic", "google")
TOOLS = [ToolCatalogItem("clock__now", "Time.", {"type": "object", "properties": {}})]

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ["", "hi", "é✓", 'a"b\\']
)
call_ids = st.sampled_from(["call_1", "call_2", "gcall-x", ""])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)


def _part() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, text),
        st.builds(
            lambda i, n, a: {"type": "tool-call", "toolCallId": i, "toolName": n, "input": a},
            call_ids,
            st.sampled_from(["clock__now", "fs__read"]),
            st.dictionaries(text, json_values, max_size=2),
        ),
        st.builds(
            lambda i, kind, v: {
                "type": "tool-result",
                "toolCallId": i,
                "toolName": "clock__now",
                "output": {"type": kind, "value": v},
            },
            call_ids,
            st.sampled_from(["json", "text", "error-text", "error-json"]),
            json_values,
        ),
        st.builds(
            lambda t, sig: {
                "type": "reasoning",
                "text": t,
                "providerOptions": {"anthropic": {"signature": sig}},
            },
            text,
            st.sampled_from(["", "sig"]),
        ),
    )


messages = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant", "tool", "system"]),
    text | st.lists(_part(), max_size=3),
)

# One step of a Turn: what the step appends, then the middleware edits of the next step.
edits = st.one_of(
    st.tuples(st.just("append"), st.lists(messages, min_size=1, max_size=3)),
    st.tuples(st.just("replace"), st.integers(0, 50), messages),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("truncate")),
    st.tuples(st.just("system"), st.none() | text),
    st.tuples(st.just("switch")),  # another conversation uses the same model for one request
)


def _message(data: dict[str, Any]) -> Message:
    return Message.create(data["role"], data["content"], source=MessageSource(type="user"))


def _model(provider: str) -> HttpModel:
    endpoint = "http://127.0.0.1:9/v1" if provider == "openai-compatible" else None
    spec = ModelSpec(provider=provider, model="m", api_key="sk-wire-cache-test", endpoint=endpoint)
    model = create_model(spec)
    assert isinstance(model, HttpModel)
    return model


def _check(model: HttpModel, request: ModelRequest, stream: bool) -> None:
    naive = model.to_wire(request, stream=stream)
    spliced = b"".join(model.payload(request, stream=stream))
    assert spliced == encode_json(naive)
    assert json.loads(spliced) == json.loads(json.dumps(naive))


def _edit(state: ConversationState, step: tuple[Any, ...]) -> None:
    """Apply a message edit step (append/replace/remove/truncate) the way step middleware
    does; an edit of a message in an empty history does nothing."""
    kind, current = step[0], state.next_messages
    if kind == "append":
        state.emit_all(MessageEvent.append(_message(m)) for m in step[1])
    elif kind == "replace" and current:
        state.emit(MessageEvent.replace(current[step[1] % len(current)].id, _message(step[2])))
    elif kind == "remove" and current:
        state.emit(MessageEvent.remove(current[step[1] % len(current)].id))
    elif kind == "truncate":
        state.emit(MessageEvent.truncate())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    provider=st.sampled_from(PROVIDERS),
    base=st.lists(messages, max_size=6),
    steps=st.lists(edits, max_size=12),
    stream=st.booleans(),
)
def test_incremental_payload_equals_naive(
    provider: str, base: list[dict[str, Any]], steps: list[tuple[Any, ...]], stream: bool
) -> None:
    model = _model(provider)
    state = ConversationState([_message(m) for m in base])
    other = ConversationState([_message({"role": "user", "content": "other conversation"})])
    system: str | None = "You are a test."
    _check(
        model, ModelRequest(messages=state.to_llm_messages(), tools=TOOLS, system=system), stream
    )
    for step in steps:
        kind = step[0]
        if kind == "system":
            system = step[1]
        elif kind == "switch":
            other.emit(MessageEvent.append(_message({"role": "assistant", "content": "more"})))
            _check(model, ModelRequest(messages=other.to_llm_messages(), system="Other."), stream)
        else:
            _edit(state, step)
        _check(
            model,
            ModelRequest(messages=state.to_llm_messages(), tools=TOOLS, system=system),
            stream,
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    provider=st.sampled_from(PROVIDERS),
    base=st.lists(messages, max_size=6),
    steps=st.lists(edits | st.tuples(st.just("commit")), max_size=14),
    stream=st.booleans(),
)
def test_incremental_payload_from_views_and_commits_equals_naive(
    provider: str, base: list[dict[str, Any]], steps: list[tuple[Any, ...]], stream: bool
) -> None:
    """As above, with the turn loop's requests: read-only views (``llm_view``) that the cache
    matches by lineage without comparing, across fold-commits (``successor``) that hand the
    history to the next turn's state."""
    model = _model(provider)
    state = ConversationState([_message(m) for m in base])
    system: str | None = "You are a test."
    _check(model, ModelRequest(messages=state.llm_view(), tools=TOOLS, system=system), stream)
    for step in steps:
        kind = step[0]
        if kind == "system":
            system = step[1]
        elif kind == "commit":
            state = state.successor()
        elif kind == "switch":
            other = ConversationState([_message({"role": "user", "content": "other"})])
            _check(model, ModelRequest(messages=other.llm_view(), system="Other."), stream)
        else:
            _edit(state, step)
        _check(model, ModelRequest(messages=state.llm_view(), tools=TOOLS, system=system), stream)


def test_appending_steps_reuse_the_cached_conversion() -> None:
    for provider in PROVIDERS:
        model = _model(provider)
        state = ConversationState(
            [_message({"role": "user", "content": f"q{i}"}) for i in range(20)]
        )
        for step in range(5):
            b"".join(model.payload(ModelRequest(messages=state.to_llm_messages())))
            state.emit(
                MessageEvent.append(
                    _message(
                        {
                            "role": "assistant",
                            "content": [
                                {
                                    "type": "tool-call",
                                    "toolCallId": f"c{step}",
                                    "toolName": "clock__now",
                                    "input": {},
                                }
                            ],
                        }
                    )
                )
            )
            state.emit(MessageEvent.append(_message({"role": "tool", "content": [
                {"type": "tool-result", "toolCallId": f"c{step}", "toolName": "clock__now",
                 "output": {"type": "json", "value": {"t": step}}}]})))
        assert model._wire is not None
        assert (model._wire.misses, model._wire.hits) == (1, 4), provider


def test_a_lone_surrogate_is_replaced_in_spliced_bytes() -> None:
    body = {"a": RawJson.array([encode_json("x\udcff")]), "b": "y\ud800"}
    assert json.loads(encode_body(body)) == {"a": ["x\ufffd"], "b": "y\ufffd"}


def test_a_long_conversation_is_sent_in_cached_blocks_the_server_reads_whole() -> None:
    """Above 64 KiB the body is several chunks (cached blocks, not copied); a real server on
    127.0.0.1 receives exactly the naive encoding, step after step and after a replace."""
    words = "lorem ipsum dolor sit amet é✓ " * 8
    history = [_message({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} {words}"})
               for i in range(1_500)]
    state = ConversationState(history)
    with FakeProvider() as fake:
        for provider in ("openai", "anthropic", "google"):
            spec = ModelSpec(provider=provider, model="m", api_key="sk-wire-cache-test",
                             endpoint=fake.base_url(provider))
            model = create_model(spec)
            assert isinstance(model, HttpModel)
            for step in range(3):
                request = ModelRequest(messages=state.to_llm_messages(), system="Long.")
                chunks = model.payload(request)
                assert len(chunks) > 3  # spliced from blocks, not one copy
                fake.enqueue("ok")
                assert run(model.generate(request)).text == "ok"
                assert fake.requests[-1].body == encode_json(model.to_wire(request))
                if step == 1:  # a middleware edit far back in the history
                    state.emit(MessageEvent.replace(state.next_messages[7].id, _message(
                        {"role": "user", "content": "edited"})))
                state.emit(
                    MessageEvent.append(_message({"role": "user", "content": f"step {step}"}))
                )


def test_a_subclass_that_builds_its_own_body_is_sent_as_built() -> None:
    from goondan.llm.openai import OpenAIModel

    class Custom(OpenAIModel):
        def to_wire(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
            return {"custom": True, **super().to_wire(request, stream=stream)}

    model = Custom(ModelSpec(provider="openai", model="m", api_key="sk-wire-cache-test"))
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    assert json.loads(b"".join(model.payload(request)))["custom"] is True


def test_an_edited_conversation_replaces_its_stale_cache_entry() -> None:
    model = _model("anthropic")
    state = ConversationState([_message({"role": "user", "content": f"q{i}"}) for i in range(10)])
    for step in range(6):
        model.payload(ModelRequest(messages=state.to_llm_messages()))
        state.emit(
            MessageEvent.replace(
                state.next_messages[5].id, _message({"role": "user", "content": f"e{step}"})
            )
        )
    assert model._wire is not None and len(model._wire._entries) == 1
