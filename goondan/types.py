"""Plain shared types: JSON aliases, ids, clocks and the small records every layer exchanges.

Python attributes are snake_case; ``to_dict``/``from_dict`` give the reference runtime's
camelCase JSON (``toolCallId``, ``createdAt`` ...). ``from_dict`` keeps unknown keys in ``extra``
and ``to_dict`` writes them back, so records survive a round trip unchanged.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeAlias

from goondan.text import clean_json, clean_text

__all__ = [
    "AgentEvent",
    "JsonObject",
    "JsonValue",
    "ReplyChannel",
    "TokenUsage",
    "ToolCall",
    "ToolCallResult",
    "ToolCatalogItem",
    "ToolError",
    "ToolSource",
    "new_id",
    "new_span_id",
    "new_trace_id",
    "now_iso",
    "uuid4_hex",
]

# str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]
JsonValue: TypeAlias = Any
JsonObject: TypeAlias = dict[str, Any]


def plain_now_iso() -> str:
    """:func:`now_iso` without its memo (``scripts/bench_turn.py`` compares the two)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"  # without "+00:00"


# now_iso's memo: (the last whole second formatted, its "YYYY-MM-DDTHH:MM:SS.") and (the last
# millisecond, its text), each one tuple replaced whole so a thread never pairs one with another's
# text. now_iso runs for every runtime event and span: 181 calls in the headline 20-step turn.
# Without the memo that turn's overhead is 5.6 % higher by instruction count (34.0 M instead of
# 32.2 M, callgrind, issue 29); timed, a call costs 0.19 instead of 1.47 us, 0.23 ms of a
# 9 ms turn (2.6 % on the loaded 2-core development machine). scripts/bench_turn.py prints it.
_second: list[tuple[int, str]] = [(-1, "")]
_millisecond: list[tuple[int, str]] = [(-1, "")]


def now_iso() -> str:
    """Current UTC time as ISO-8601 with milliseconds and ``Z`` (``2026-03-04T08:05:09.120Z``);
    the date of the current second is formatted once, and a call in the same millisecond as the
    one before returns its text."""
    now = time.time_ns() // 1_000_000
    last, text = _millisecond[0]
    if last == now:
        return text
    seconds, millis = divmod(now, 1000)
    second, prefix = _second[0]
    if second != seconds:
        prefix = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        _second[0] = (seconds, prefix)
    text = f"{prefix}{millis:03d}Z"
    _millisecond[0] = (now, text)
    return text


def new_id(prefix: str) -> str:
    """A unique, roughly time-ordered id such as ``msg-0194f1c2a3b4-9f8e7d6c``."""
    return f"{prefix}-{time.time_ns() // 1_000_000:012x}-{os.urandom(4).hex()}"


def new_trace_id() -> str:
    """OpenTelemetry-compatible trace id: 32 lower-case hex digits, never all zero."""
    return uuid4_hex()


def uuid4_hex() -> str:
    """``uuid.uuid4().hex``, built from ``os.urandom`` the same way without importing ``uuid``
    (nor ``secrets`` with ``hmac`` and ``random``) at every start (docs/runtime.md
    "Performance")."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def new_span_id() -> str:
    """OpenTelemetry-compatible span id: 16 lower-case hex digits, never all zero.

    From the ``random`` module's generator, as the OpenTelemetry SDKs do: span ids need to be
    unique, not secret, and this is made for every step, LLM call and tool call without a
    system call (``random`` reseeds itself in a forked child)."""
    bits = _getrandbits
    if bits is None:  # ``random`` is imported at the first span, not at every start
        import random

        bits = _bind_random(random.getrandbits)
    return f"{bits(64) or 1:016x}"


_getrandbits: Callable[[int], int] | None = None


def _bind_random(getrandbits: Callable[[int], int]) -> Callable[[int], int]:
    global _getrandbits
    _getrandbits = getrandbits
    return getrandbits


def _split(data: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in known}


@dataclass
class ToolCall:
    """One tool call requested by the model: ``{id, name, args}``."""

    id: str
    name: str
    args: JsonObject = field(default_factory=dict)
    # The model's raw argument text when it was not a JSON object (``args`` is then ``{}``):
    # the executor answers it with an E_TOOL_INVALID_ARGS result so the model can correct
    # itself (docs/models.md "Tool calls the model gets wrong").
    invalid_args: str | None = field(default=None, compare=False)

    def to_dict(self) -> JsonObject:
        return {"id": self.id, "name": self.name, "args": self.args}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(id=str(data["id"]), name=str(data["name"]), args=dict(data.get("args") or {}))


@dataclass
class ToolError:
    """The ``error`` member of an error :class:`ToolCallResult` (docs/tools.md
    "Errors are results")."""

    message: str
    code: str | None = None
    name: str | None = None
    suggestion: str | None = None
    help_url: str | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"message": self.message}
        for key, value in (
            ("code", self.code),
            ("name", self.name),
            ("suggestion", self.suggestion),
            ("helpUrl", self.help_url),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolError:
        return cls(
            message=str(data.get("message", "")),
            code=data.get("code"),
            name=data.get("name"),
            suggestion=data.get("suggestion"),
            help_url=data.get("helpUrl"),
        )


@dataclass
class ToolCallResult:
    """Outcome of one tool call. Tool failures are values, never exceptions (docs/tools.md
    "Errors are results")."""

    tool_call_id: str
    tool_name: str
    status: Literal["ok", "error"]
    output: JsonValue = None
    error: ToolError | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def success(cls, tool_call_id: str, tool_name: str, output: JsonValue) -> ToolCallResult:
        return cls(tool_call_id, tool_name, "ok", output=output)

    @classmethod
    def failure(
        cls,
        tool_call_id: str,
        tool_name: str,
        message: str,
        *,
        code: str,
        name: str | None = None,
        suggestion: str | None = None,
        help_url: str | None = None,
    ) -> ToolCallResult:
        error = ToolError(message, code=code, name=name, suggestion=suggestion, help_url=help_url)
        return cls(tool_call_id, tool_name, "error", error=error)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "status": self.status,
        }
        if self.status == "ok":
            out["output"] = self.output
        if self.error is not None:
            out["error"] = self.error.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallResult:
        error = data.get("error")
        return cls(
            tool_call_id=str(data["toolCallId"]),
            tool_name=str(data["toolName"]),
            status="ok" if data.get("status") == "ok" else "error",
            output=data.get("output"),
            error=ToolError.from_dict(error) if isinstance(error, dict) else None,
        )


@dataclass
class ToolSource:
    """Where a catalog item came from: config, extension, mcp or a2a (docs/tools.md)."""

    type: Literal["config", "extension", "mcp", "a2a"]
    name: str
    mcp: JsonObject | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"type": self.type, "name": self.name}
        if self.mcp is not None:
            out["mcp"] = self.mcp
        return out


@dataclass
class ToolCatalogItem:
    """A tool as offered to the model: ``{name, description, parameters, source}``."""

    name: str
    description: str = ""
    parameters: JsonObject = field(default_factory=lambda: {"type": "object", "properties": {}})
    source: ToolSource | None = None

    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.source is not None:
            out["source"] = self.source.to_dict()
        return out

    @classmethod
    def coerce(cls, item: ToolCatalogItem | dict[str, Any]) -> ToolCatalogItem:
        """Accept a catalog item or the plain dict form extension authors write."""
        if isinstance(item, ToolCatalogItem):
            return item
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise TypeError("a tool catalog item needs at least a string 'name'")
        source = item.get("source")
        if isinstance(source, dict):
            source = ToolSource(
                type=source.get("type", "extension"), name=str(source.get("name", "")),
                mcp=source.get("mcp"),
            )
        return cls(
            name=item["name"],
            description=str(item.get("description") or ""),
            parameters=dict(item.get("parameters") or {"type": "object", "properties": {}}),
            source=source if isinstance(source, ToolSource) else None,
        )


@dataclass
class ReplyChannel:
    """Where a request's answer goes: ``{target, correlationId}``."""

    target: str
    correlation_id: str

    def to_dict(self) -> JsonObject:
        return {"target": self.target, "correlationId": self.correlation_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplyChannel:
        return cls(target=str(data["target"]), correlation_id=str(data["correlationId"]))


@dataclass
class AgentEvent:
    """Input to an agent instance: one event = one Turn (docs/runtime.md).

    What the runtime and the swarm themselves read is typed: ``parent_span_id`` (the span the
    Turn is a child of), ``reply_target`` (an answer: the process it goes back to),
    ``start_marker`` (where a stored input's start is claimed, ``{path, id}`` or ``{queue, id}``,
    docs/orchestrator.md "Durable inputs") and
    ``stream`` (report the Turn's runtime events as they happen), ``steer_into`` (the id of the
    running Turn this input joins, ``inputPolicy: steer``), ``was_steered`` (it had joined a Turn
    whose process died) and ``wait_for_final`` (the caller waits for the final answer of a Turn
    that parks on approvals, ``send --wait``). On the wire they are the top-level keys
    ``parentSpanId``, ``replyTarget``, ``startMarker``, ``stream``, ``steerInto``, ``wasSteered``
    and ``waitForFinal``; the metadata keys the first four used to ride in
    (:data:`LEGACY_METADATA_KEYS`) are still read."""

    type: str
    input: str | None = None
    instance_key: str | None = None
    source: JsonObject = field(default_factory=lambda: {"kind": "connector", "name": "cli"})
    id: str = field(default_factory=lambda: new_id("evt"))
    created_at: str = field(default_factory=now_iso)
    trace_id: str | None = None
    metadata: JsonObject = field(default_factory=dict)
    auth: JsonObject | None = None
    reply_to: ReplyChannel | None = None
    extra: JsonObject = field(default_factory=dict)
    parent_span_id: str | None = None
    reply_target: str | None = None
    start_marker: JsonObject | None = None
    stream: bool = False
    steer_into: str | None = None
    was_steered: bool = False
    wait_for_final: bool = False

    _KEYS = (
        "id", "type", "createdAt", "traceId", "metadata", "input", "instanceKey",
        "source", "auth", "replyTo", "parentSpanId", "replyTarget", "startMarker", "stream",
        "steerInto", "wasSteered", "waitForFinal",
    )

    def __post_init__(self) -> None:
        # Input from stdin, argv, connectors and other agents: the U+FFFD rule (docs/security.md).
        if isinstance(self.input, str):
            self.input = clean_text(self.input)
        self.metadata = clean_json(self.metadata)
        if any(key in self.metadata for key in LEGACY_METADATA_KEYS.values()):
            self._lift_legacy_metadata()

    def _lift_legacy_metadata(self) -> None:
        """An event written before the typed fields (an inbox record, an older caller) carries
        them as metadata keys: they become the fields (a field already set wins)."""
        metadata = dict(self.metadata)
        parent = metadata.pop(LEGACY_METADATA_KEYS["parent_span_id"], None)
        target = metadata.pop(LEGACY_METADATA_KEYS["reply_target"], None)
        marker = metadata.pop(LEGACY_METADATA_KEYS["start_marker"], None)
        stream = metadata.pop(LEGACY_METADATA_KEYS["stream"], None)
        self.metadata = metadata
        if self.parent_span_id is None and isinstance(parent, str) and parent:
            self.parent_span_id = parent
        if self.reply_target is None and isinstance(target, str) and target:
            self.reply_target = target
        if self.start_marker is None and isinstance(marker, dict):
            self.start_marker = marker
        self.stream = self.stream or stream is True

    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "type": self.type,
            "createdAt": self.created_at,
            "source": self.source,
        }
        if self.trace_id is not None:
            out["traceId"] = self.trace_id
        if self.input is not None:
            out["input"] = self.input
        if self.instance_key is not None:
            out["instanceKey"] = self.instance_key
        if self.metadata:
            out["metadata"] = self.metadata
        if self.auth is not None:
            out["auth"] = self.auth
        if self.reply_to is not None:
            out["replyTo"] = self.reply_to.to_dict()
        if self.parent_span_id is not None:
            out["parentSpanId"] = self.parent_span_id
        if self.reply_target is not None:
            out["replyTarget"] = self.reply_target
        if self.start_marker is not None:
            out["startMarker"] = self.start_marker
        if self.stream:
            out["stream"] = True
        if self.steer_into is not None:
            out["steerInto"] = self.steer_into
        if self.was_steered:
            out["wasSteered"] = True
        if self.wait_for_final:
            out["waitForFinal"] = True
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentEvent:
        reply = data.get("replyTo")
        marker = data.get("startMarker")
        return cls(
            id=str(data.get("id") or new_id("evt")),
            type=str(data.get("type") or "message"),
            created_at=str(data.get("createdAt") or now_iso()),
            trace_id=data.get("traceId"),
            metadata=dict(data.get("metadata") or {}),
            input=data.get("input"),
            instance_key=data.get("instanceKey"),
            source=dict(data.get("source") or {}),
            auth=data.get("auth"),
            reply_to=ReplyChannel.from_dict(reply) if isinstance(reply, dict) else None,
            extra=_split(data, cls._KEYS),
            parent_span_id=_str_or_none(data.get("parentSpanId")),
            reply_target=_str_or_none(data.get("replyTarget")),
            start_marker=marker if isinstance(marker, dict) else None,
            stream=data.get("stream") is True,
            steer_into=_str_or_none(data.get("steerInto")),
            was_steered=data.get("wasSteered") is True,
            wait_for_final=data.get("waitForFinal") is True,
        )


# The metadata keys the typed fields of AgentEvent rode in before they were fields; still read
# (an inbox record written by an older version, an extension that sets metadata).
LEGACY_METADATA_KEYS: Final = {
    "parent_span_id": "parentSpanId",
    "reply_target": "replyTarget",
    "start_marker": "__goondanStartMarker",
    "stream": "__goondanStream",
}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass
class TokenUsage:
    """Token counts of one or more model calls; ``cached`` when the provider reports it."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int | None = None
    # Model calls whose provider never reported usage (a stream without a usage chunk): their
    # tokens are unknown, not zero, and the counts above leave them out.
    unknown_calls: int = 0

    @classmethod
    def unknown(cls) -> TokenUsage:
        """The usage of one model call whose provider reported none."""
        return cls(unknown_calls=1)

    def __add__(self, other: TokenUsage) -> TokenUsage:
        cached: int | None = None
        if self.cached_tokens is not None or other.cached_tokens is not None:
            cached = (self.cached_tokens or 0) + (other.cached_tokens or 0)
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.total_tokens + other.total_tokens,
            cached,
            self.unknown_calls + other.unknown_calls,
        )

    def to_dict(self) -> JsonObject:
        """Bus/log form ``{prompt, completion, total, cached?}`` (docs/runtime.md
        "Runtime events")."""
        out: JsonObject = {
            "prompt": self.input_tokens,
            "completion": self.output_tokens,
            "total": self.total_tokens,
        }
        if self.cached_tokens is not None:
            out["cached"] = self.cached_tokens
        if self.unknown_calls:
            out["unknownCalls"] = self.unknown_calls
        return out
