"""What goes into a turn: the user-message text of an event, the model, ``ctx.agents``.

* :func:`input_text` renders an :class:`AgentEvent` as the text of the turn's user message
  (docs/runtime.md "The turn loop"). Plain input (the REPL, the embedding API) is just the text;
  events from an agent, or connector events carrying ``properties``, get a ``[goondan_context]``
  header so the model knows where the message came from.
* :func:`model_spec_for` turns an Agent's ``ModelBinding`` into the adapter layer's
  :class:`ModelSpec`, resolving and registering the API key.
* :class:`UnavailableAgents` is ``ctx.agents`` when no orchestrator is attached.
* :func:`default_model_factory` builds an agent's model when none is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.errors import AgentError
from goondan.llm.base import LanguageModel, ModelSpec
from goondan.secrets import register_secret
from goondan.types import AgentEvent, JsonObject

if TYPE_CHECKING:
    from goondan.config import ModelBinding

__all__ = ["CONNECTOR_EVENT_KEY", "INPUT_ID_KEY", "UnavailableAgents", "connector_input_written",
           "default_model_factory", "input_tag", "input_text", "model_spec_for",
           "recorded_answer"]

CONTEXT_OPEN = "[goondan_context]"
CONTEXT_CLOSE = "[/goondan_context]"
# The id of the connector event a Turn runs for (event metadata, set by the ingress); the Turn's
# input message carries it too (docs/connectors.md "Delivery guarantee").
CONNECTOR_EVENT_KEY = "connectorEventId"


# The id of a durably stored input (any source, docs/orchestrator.md "Durable inputs"): the
# ``id`` of the event's start marker (:attr:`AgentEvent.start_marker`).
INPUT_ID_KEY = "inputId"


def input_tag(event: AgentEvent) -> dict[str, str] | None:
    """The metadata that ties a Turn's user message to its durable input: the connector event's
    id, else the stored input's id (None: the input was not stored, e.g. the embedding API)."""
    source = event.metadata.get(CONNECTOR_EVENT_KEY)
    if isinstance(source, str):
        return {CONNECTOR_EVENT_KEY: source}
    marker = event.start_marker
    if isinstance(marker, dict) and isinstance(marker.get("id"), str):
        return {INPUT_ID_KEY: marker["id"]}
    return None


def connector_input_written(messages: Any, event: AgentEvent) -> bool:
    """True when ``messages`` hold the input of ``event`` (its :func:`input_tag`): a Turn
    started for it, in this or an earlier process."""
    tag = input_tag(event)
    if tag is None:
        return False
    (key, value), = tag.items()
    return any(m.role == "user" and m.metadata.get(key) == value for m in messages)


_TAG_KEYS = (CONNECTOR_EVENT_KEY, INPUT_ID_KEY)


def recorded_answer(messages: Any, event: AgentEvent) -> str | None:
    """The final answer of the finished Turn of ``event`` in ``messages``: the text of the last
    assistant message without tool calls after its input and before the next user input, or
    None (no input of it, or its Turn gave no answer). A redelivered event whose Turn finished
    in a process that died before its answer left it is answered with this."""
    tag = input_tag(event)
    if tag is None:
        return None
    (key, value), = tag.items()
    found = None
    answer: str | None = None
    for message in messages:
        if found is None:
            found = message if message.role == "user" and message.metadata.get(key) == value \
                else None
            continue
        if message.role == "user" and any(k in message.metadata for k in _TAG_KEYS):
            break  # the next input's Turn
        if message.role == "assistant" and not message.tool_calls:
            answer = message.text
    return answer


def _properties(event: AgentEvent) -> JsonObject:
    props = event.extra.get("properties")
    if not isinstance(props, dict):
        props = event.metadata.get("properties")
    return dict(props) if isinstance(props, dict) else {}


# Tracing bookkeeping an agent event carries in its metadata: never part of the user's text.
_SPAN_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def input_text(event: AgentEvent, *, header: bool = False) -> str:
    """The user-message text for ``event`` (header only for agent / connector-with-properties,
    or always with ``header``: a steered input, goondan.runtime.steering).

    The header is the reference's (runtime.md §8): ``{"source": {kind, name}, "event",
    "instanceKey", "properties", "metadata"}``, ``properties`` and ``metadata`` always present.
    """
    text = event.input or ""
    kind = event.source.get("kind")
    properties = _properties(event)
    if kind == "agent":
        properties.setdefault("from_agent", event.source.get("name"))
        caller_key = event.metadata.get("callerInstanceKey")
        if caller_key is not None:
            properties.setdefault("from_instance", caller_key)
    elif not properties and not header:
        return text
    # Internal bookkeeping (call stacks, hop counts, span ids) is not the model's business.
    metadata = {
        k: v for k, v in event.metadata.items()
        if not k.startswith("__") and k != "properties" and k not in _SPAN_KEYS
    }
    context: JsonObject = {
        "source": {"kind": kind, "name": event.source.get("name")},
        "event": event.type,
        "instanceKey": event.instance_key,
        "properties": properties,
        "metadata": metadata,
    }
    body = json.dumps(context, ensure_ascii=False, separators=(",", ":"), default=str)
    lines = [CONTEXT_OPEN, body, CONTEXT_CLOSE]
    if text:
        lines.append(text)
    return "\n".join(lines)


def model_spec_for(binding: ModelBinding, env: Mapping[str, str]) -> ModelSpec:
    """Build the adapter-level :class:`ModelSpec` for a Model binding; the key is registered
    with :mod:`goondan.secrets` so it can never be printed."""
    api_key, api_key_env = binding.resolve_api_key(env)
    register_secret(api_key)
    return ModelSpec(
        provider=binding.provider,
        model=binding.model,
        api_key=api_key,
        api_key_env=api_key_env,
        endpoint=binding.endpoint,
        options=dict(binding.options or {}),
        capabilities=dict(binding.capabilities or {}),
        timeout_ms=binding.timeout_ms,
        name=binding.name,
        offline_alternatives=list(binding.offline_alternatives),
    )


class UnavailableAgents:
    """``ctx.agents`` / ``ToolContext.runtime`` when the instance runs without an orchestrator."""

    def _fail(self, target: str) -> AgentError:
        return AgentError(
            f"cannot reach agent {target!r}: agent-to-agent calls need the orchestrator",
            code="E_AGENT_UNAVAILABLE",
            suggestion="Run the swarm with `goondan run` to let agents call each other.",
        )

    async def request(self, target: str, input: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Always fails with ``E_AGENT_UNAVAILABLE``."""
        raise self._fail(target)

    async def send(self, target: str, input: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Always fails with ``E_AGENT_UNAVAILABLE``."""
        raise self._fail(target)

    def __repr__(self) -> str:
        return "UnavailableAgents()"


def default_model_factory(spec: Any) -> Callable[[ModelSpec], LanguageModel]:
    """``goondan.llm.create_model`` with scripted models' files resolved against the bundle."""
    resource = getattr(spec, "resource", None)
    root = getattr(resource, "root", None)

    def factory(model_spec: ModelSpec) -> LanguageModel:
        from goondan.llm import create_model

        return create_model(model_spec, base_dir=Path(root) if root else None)

    return factory
