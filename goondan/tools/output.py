"""What happens to a tool's output before it is stored and sent to the model (docs/tools.md).

Every successful tool result passes :func:`finalize_output` in the executor:

1. the U+FFFD rule (``goondan.text``) — a lone surrogate in a file name or a byte of garbage in
   a command's output must not break the conversation;
2. registered secrets are masked (``goondan.secrets``) — ``echo $OPENAI_API_KEY`` stores ``***``;
3. the size cap — the output's compact JSON form may be at most ``limit`` UTF-8 bytes (default
   256 KiB; Tool ``spec.maxOutputBytes``, Agent ``spec.maxToolOutputBytes``). A longer output is
   cut, keeping its shape where it can: a string is cut and ends with a marker; in an object the
   longest strings are shortened (each ending with ``…[truncated N bytes]``) and the key
   ``outputTruncated: {originalBytes, limitBytes, file?}`` is added; anything else becomes
   ``{"outputTruncated": {...}, "preview": "<start of the JSON text>"}``. With the Agent's
   ``spec.spillToolOutput: true`` the full (masked) JSON is first written to
   ``<workdir>/.goondan/tool-output/<toolCallId>.json`` and ``file`` names it.

:class:`ToolSettings` carries the per-agent values the executor needs (limits, each Tool's
``config`` as ``ToolContext.config``, spilling).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.secrets import mask
from goondan.text import clean_text
from goondan.types import JsonObject, JsonValue
from goondan.workspace.files import private_dirs, private_opener

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "TRUNCATED_KEY",
    "ToolSettings",
    "cap_output",
    "finalize_output",
    "scrub_output",
    "spill_path",
]

DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024
TRUNCATED_KEY = "outputTruncated"
# Room kept for the marker key and the per-string markers when shrinking an object.
_MARKER_ROOM = 256
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class ToolSettings:
    """Per-agent tool settings: output caps, each Tool's ``config``, spilling."""

    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    tool_max_output_bytes: Mapping[str, int] = field(default_factory=dict)
    tool_configs: Mapping[str, JsonObject] = field(default_factory=dict)
    spill: bool = False

    @classmethod
    def from_spec(cls, spec: Any) -> ToolSettings:
        """Settings from an ``AgentSpec`` (tools without their own cap use the Agent's)."""
        limits = {t.name: t.max_output_bytes for t in getattr(spec, "tools", ())
                  if getattr(t, "max_output_bytes", None)}
        configs = {
            t.name: dict(getattr(t, "config", None) or {}) for t in getattr(spec, "tools", ())
        }
        return cls(
            max_output_bytes=getattr(spec, "max_tool_output_bytes", None)
            or DEFAULT_MAX_OUTPUT_BYTES,
            tool_max_output_bytes=limits,
            tool_configs=configs,
            spill=bool(getattr(spec, "spill_tool_output", False)),
        )

    def limit_for(self, tool: str | None) -> int:
        """The cap of the Tool resource ``tool`` (its own, else the Agent's)."""
        return self.tool_max_output_bytes.get(tool or "", self.max_output_bytes)

    def config_for(self, tool: str | None) -> JsonObject:
        """The Tool resource's ``config`` (``spec.config`` merged with the Agent reference's)."""
        return dict(self.tool_configs.get(tool or "", {}))


def scrub_output(value: JsonValue) -> JsonValue:
    """Every string of ``value`` (keys too) after the U+FFFD rule and secret masking."""
    if isinstance(value, str):
        return mask(clean_text(value))
    if isinstance(value, dict):
        return {
            mask(clean_text(k)) if isinstance(k, str) else k: scrub_output(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [scrub_output(v) for v in value]
    return value


def _dumps(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _size(value: JsonValue) -> int:
    return len(_dumps(value).encode("utf-8"))


def _cut(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, never inside a character."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[: max(max_bytes, 0)].decode("utf-8", "ignore")


def _strings(value: JsonValue, out: list[int]) -> None:
    if isinstance(value, str):
        out.append(len(_dumps(value).encode("utf-8")) - 2)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


def _threshold(lengths: list[int], excess: int) -> int:
    """The largest length ``t`` such that cutting every string to ``t`` removes ``excess``."""
    low, high = 0, max(lengths, default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(max(0, n - mid) for n in lengths) >= excess:
            low = mid
        else:
            high = mid - 1
    return low


def _shrink(value: JsonValue, threshold: int) -> JsonValue:
    if isinstance(value, str):
        data = value.encode("utf-8")
        if len(data) <= threshold:
            return value
        kept = _cut(value, threshold)
        return f"{kept}…[truncated {len(data) - len(kept.encode('utf-8'))} bytes]"
    if isinstance(value, dict):
        return {k: _shrink(v, threshold) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v, threshold) for v in value]
    return value


def cap_output(
    output: JsonValue, limit: int, *, spill: Callable[[str], str | None] | None = None
) -> JsonValue:
    """``output`` if its JSON form fits ``limit`` bytes, else a marked, shortened version."""
    text = _dumps(output)
    size = len(text.encode("utf-8"))
    if size <= limit:
        return output
    info: JsonObject = {"originalBytes": size, "limitBytes": limit}
    file = spill(text) if spill is not None else None
    if file:
        info["file"] = file
    if isinstance(output, str):
        marker = f"\n…[output truncated: {size} bytes, limit {limit}" + (
            f"; full output in {file}]" if file else "]"
        )
        # The string is stored as JSON: leave room for its quotes and escapes.
        budget = limit - len(marker.encode("utf-8")) - 2
        kept = _cut(output, budget)
        while kept and _size(kept + marker) > limit:
            kept = _cut(kept, len(kept.encode("utf-8")) - max(16, (_size(kept + marker) - limit)))
        return kept + marker
    if isinstance(output, dict) and TRUNCATED_KEY not in output:
        lengths: list[int] = []
        _strings(output, lengths)
        excess = size - limit + _MARKER_ROOM
        for _ in range(4):
            candidate = _shrink(output, _threshold(lengths, excess))
            assert isinstance(candidate, dict)
            candidate[TRUNCATED_KEY] = info
            over = _size(candidate) - limit
            if over <= 0:
                return candidate
            excess += over + _MARKER_ROOM
    preview_budget = max(limit - _size({TRUNCATED_KEY: info, "preview": ""}) - 16, 0)
    preview = _cut(text, preview_budget)
    while preview and _size({TRUNCATED_KEY: info, "preview": preview}) > limit:
        preview = _cut(preview, len(preview.encode("utf-8")) * 9 // 10)
    return {TRUNCATED_KEY: info, "preview": preview}


def spill_path(workdir: Path, tool_call_id: str) -> Path:
    """Where the full output of ``tool_call_id`` is spilled."""
    return workdir / ".goondan" / "tool-output" / f"{_UNSAFE.sub('_', tool_call_id) or 'call'}.json"


def finalize_output(
    output: JsonValue, *, limit: int, spill_to: Path | None = None,
) -> JsonValue:
    """Scrub (U+FFFD rule, secrets) then cap ``output``; spill to ``spill_to`` when given."""
    output = scrub_output(output)

    def spill(text: str) -> str | None:
        assert spill_to is not None
        try:
            private_dirs(spill_to.parent)
            with open(spill_to, "w", encoding="utf-8", opener=private_opener) as handle:
                handle.write(text)
        except OSError:
            return None
        return str(spill_to)

    return cap_output(output, limit, spill=spill if spill_to is not None else None)
