"""Message, MessageSource and MessageEvent, with their on-disk JSON form.

The JSON form is the reference runtime's record format (docs/conversations.md "Record format")::

    {"id": "msg-7f3a", "data": {"role": "assistant", "content": [...]},
     "metadata": {"pinned": true}, "createdAt": "2026-03-04T08:05:09.120Z",
     "source": {"type": "assistant", "stepId": "turn-1-step-0"}}

``data`` is kept verbatim (a provider-neutral AI-SDK style message dict). Content parts:

* ``{"type": "text", "text": ...}``
* ``{"type": "tool-call", "toolCallId", "toolName", "input": {...}}`` (``args`` accepted on read)
* ``{"type": "tool-result", "toolCallId", "toolName", "output": {"type": "text"|"json"|"error-json",
  "value": ...}}``

Unknown top-level keys of a record are preserved in ``extra`` and written back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from goondan.text import clean_json
from goondan.types import JsonObject, ToolCall, ToolCallResult, new_id, now_iso

__all__ = [
    "Message",
    "MessageEvent",
    "MessageSource",
    "SourceType",
    "message_text",
    "tool_calls_of",
]

SourceType = Literal["user", "assistant", "tool", "system", "extension"]
_SOURCE_TYPES = ("user", "assistant", "tool", "system", "extension")
# The fields each variant owns; anything else in a stored source is kept in ``extra``.
_SOURCE_FIELDS = {
    "assistant": (("stepId", "step_id"),),
    "tool": (("toolCallId", "tool_call_id"), ("toolName", "tool_name")),
    "extension": (("extensionName", "extension_name"),),
}


@dataclass(frozen=True)
class MessageSource:
    """Who produced a message; JSON keeps the variant's own fields (those that are set).

    Unknown keys of a stored source (including another variant's fields) are kept in ``extra``
    and written back after the known ones, so a rewrite preserves them.
    """

    type: SourceType
    step_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    extension_name: str | None = None
    # None rather than an empty dict: one object less per message on long histories.
    extra: JsonObject | None = field(default=None, hash=False, compare=False)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"type": self.type}
        for key, attr in _SOURCE_FIELDS.get(self.type, ()):
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        if self.extra:
            out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> MessageSource:
        if not isinstance(data, dict) or data.get("type") not in _SOURCE_TYPES:
            raise ValueError(f"invalid message source: {data!r}")
        fields = _SOURCE_FIELDS.get(data["type"], ())
        known = {key for key, _ in fields}
        return cls(
            type=data["type"],
            **{attr: data.get(key) for key, attr in fields},
            extra={k: v for k, v in data.items() if k != "type" and k not in known} or None,
        )


@dataclass(eq=False)
class Message:
    """One conversation message. ``id`` is stable forever; ``metadata`` is free for extensions."""

    id: str
    data: JsonObject
    source: MessageSource
    metadata: JsonObject = field(default_factory=dict)
    created_at: str = field(default_factory=now_iso)
    extra: JsonObject = field(default_factory=dict)

    _KEYS = ("id", "data", "metadata", "createdAt", "source")

    def __post_init__(self) -> None:
        # Every message passes here (new ones and those read from disk), so a lone surrogate
        # never enters or survives in a conversation (the U+FFFD rule, docs/security.md).
        self.data = clean_json(self.data)
        self.metadata = clean_json(self.metadata)

    # -- convenience ---------------------------------------------------------------------------
    @property
    def role(self) -> str:
        return str(self.data.get("role", ""))

    @property
    def text(self) -> str:
        """Concatenated text content (string content, or every ``text`` part)."""
        return message_text(self.data)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return tool_calls_of(self.data)

    # -- constructors ----------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        role: str,
        content: str | list[JsonObject],
        *,
        source: MessageSource,
        metadata: JsonObject | None = None,
        id: str | None = None,
    ) -> Message:
        return cls(
            id=id or new_id("msg"),
            data={"role": role, "content": content},
            source=source,
            metadata=dict(metadata or {}),
        )

    @classmethod
    def user(cls, text: str, *, metadata: JsonObject | None = None) -> Message:
        return cls.create("user", text, source=MessageSource("user"), metadata=metadata)

    @classmethod
    def system(
        cls, text: str, *, metadata: JsonObject | None = None, extension: str | None = None
    ) -> Message:
        source = (
            MessageSource("extension", extension_name=extension)
            if extension
            else MessageSource("system")
        )
        return cls.create("system", text, source=source, metadata=metadata)

    @classmethod
    def assistant(
        cls,
        text: str,
        tool_calls: list[ToolCall] | None = None,
        *,
        step_id: str | None = None,
        metadata: JsonObject | None = None,
        call_options: dict[str, JsonObject] | None = None,
        reasoning: list[JsonObject] | None = None,
    ) -> Message:
        """An assistant message; ``call_options`` maps a tool-call id to the ``providerOptions``
        stored on its part (adapters read them back, e.g. Gemini thought signatures) and
        ``reasoning`` parts come first (e.g. Claude's signed thinking, replayed with tool use)."""
        parts: list[JsonObject] = list(reasoning or ())
        if text:
            parts.append({"type": "text", "text": text})
        for call in tool_calls or ():
            part: JsonObject = {
                "type": "tool-call",
                "toolCallId": call.id,
                "toolName": call.name,
                "input": call.args,
            }
            if call_options and call.id in call_options:
                part["providerOptions"] = call_options[call.id]
            parts.append(part)
        return cls.create(
            "assistant",
            parts,
            source=MessageSource("assistant", step_id=step_id),
            metadata=metadata,
        )

    @classmethod
    def tool_result(cls, result: ToolCallResult, *, metadata: JsonObject | None = None) -> Message:
        """A ``role: tool`` message carrying one tool-result part (docs/conversations.md
        "Record format")."""
        if result.status == "ok":
            output: JsonObject = (
                {"type": "text", "value": result.output}
                if isinstance(result.output, str)
                else {"type": "json", "value": result.output}
            )
        else:
            assert result.error is not None
            output = {"type": "error-json", "value": result.error.to_dict()}
        part = {
            "type": "tool-result",
            "toolCallId": result.tool_call_id,
            "toolName": result.tool_name,
            "output": output,
        }
        source = MessageSource("tool", tool_call_id=result.tool_call_id, tool_name=result.tool_name)
        return cls.create("tool", [part], source=source, metadata=metadata)

    # -- JSON codec ------------------------------------------------------------------------------
    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "data": self.data,
            "metadata": self.metadata,
            "createdAt": self.created_at,
            "source": self.source.to_dict(),
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Message:
        """Parse a record; raises ``ValueError`` when it is not a valid Message."""
        if not isinstance(data, dict):
            raise ValueError("a message record must be a JSON object")
        msg_id, body = data.get("id"), data.get("data")
        if not isinstance(msg_id, str) or not msg_id:
            raise ValueError("a message needs a non-empty string 'id'")
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("role"), str)
            or "content" not in body
        ):
            raise ValueError("a message needs 'data' with a string 'role' and a 'content'")
        metadata = data.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ValueError("message 'metadata' must be an object")
        created = data.get("createdAt", "")
        if not isinstance(created, str):
            raise ValueError("message 'createdAt' must be an ISO-8601 string")
        return cls(
            id=msg_id,
            data=body,
            source=MessageSource.from_dict(data.get("source")),
            metadata=metadata,
            created_at=created,
            extra={k: v for k, v in data.items() if k not in cls._KEYS},
        )

    def __repr__(self) -> str:
        preview = self.text[:40]
        return f"Message(id={self.id!r}, role={self.role!r}, text={preview!r})"


@dataclass(eq=False)
class MessageEvent:
    """``append | replace | remove | truncate`` (docs/conversations.md)."""

    type: Literal["append", "replace", "remove", "truncate"]
    message: Message | None = None
    target_id: str | None = None
    extra: JsonObject = field(default_factory=dict)

    _KEYS = ("type", "message", "targetId")

    @classmethod
    def append(cls, message: Message) -> MessageEvent:
        return cls("append", message=message)

    @classmethod
    def replace(cls, target_id: str, message: Message) -> MessageEvent:
        return cls("replace", message=message, target_id=target_id)

    @classmethod
    def remove(cls, target_id: str) -> MessageEvent:
        return cls("remove", target_id=target_id)

    @classmethod
    def truncate(cls) -> MessageEvent:
        return cls("truncate")

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"type": self.type}
        if self.type in ("replace", "remove"):
            out["targetId"] = self.target_id
        if self.type in ("append", "replace") and self.message is not None:
            out["message"] = self.message.to_dict()
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> MessageEvent:
        """Parse an event record; raises ``ValueError`` when it is not a valid event."""
        if not isinstance(data, dict):
            raise ValueError("an event record must be a JSON object")
        kind = data.get("type")
        extra = {k: v for k, v in data.items() if k not in cls._KEYS}
        if kind == "append":
            return cls("append", message=Message.from_dict(data.get("message")), extra=extra)
        if kind == "replace":
            target = data.get("targetId")
            if not isinstance(target, str):
                raise ValueError("a replace event needs a string 'targetId'")
            return cls(
                "replace",
                message=Message.from_dict(data.get("message")),
                target_id=target,
                extra=extra,
            )
        if kind == "remove":
            target = data.get("targetId")
            if not isinstance(target, str):
                raise ValueError("a remove event needs a string 'targetId'")
            return cls("remove", target_id=target, extra=extra)
        if kind == "truncate":
            return cls("truncate", extra=extra)
        raise ValueError(f"unknown message event type: {kind!r}")


def message_text(data: JsonObject) -> str:
    content = data.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def tool_calls_of(data: JsonObject) -> list[ToolCall]:
    content = data.get("content")
    calls: list[ToolCall] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "tool-call":
                args = part.get("input", part.get("args"))
                # A stored record may carry any JSON here; never let it break a load.
                calls.append(ToolCall(str(part.get("toolCallId")), str(part.get("toolName")),
                                      dict(args) if isinstance(args, dict) else {}))
    return calls
