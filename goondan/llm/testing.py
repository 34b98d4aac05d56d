"""Test and demo models: a scripted model, a function model and a network guard.

:class:`ScriptedModel` replays a list of replies (text, tool calls, errors) and records every
request it receives, so tests can assert what the runtime sent and that the script was used up
(:meth:`ScriptedModel.assert_complete`). :class:`FunctionModel` computes each reply with a
function. Both implement :class:`goondan.llm.base.LanguageModel`, stream like a real adapter
(text and tool-call deltas through ``on_delta``) and honour cancellation.

A Model resource with ``provider: scripted`` is built by :func:`scripted_from_spec`, which makes
offline demos possible without any API key::

    kind: Model
    metadata: {name: demo}
    spec:
      provider: scripted
      model: demo
      options:
        loop: true
        script:
          - when: "(?i)time"                    # rule: matched against the last user message
            steps:
              - toolCalls: [{name: clock__now, args: {}}]
              - text: "It is {{toolResult}}."
          - text: "Ask me for the time."        # sequential items, in order

Script items (Python or YAML): a string (a text reply); a :class:`ModelResponse`; a dict
``{text, toolCalls: [{name, args, id?}], finishReason?, usage?, delayMs?, error?}``; an exception
instance (raised when reached); a callable ``(request) -> item`` (sync or async); or a
:class:`ScriptStep` to add a delay or a ``when`` rule in Python.

The network guard (:data:`ALLOW_MODEL_REQUESTS`, :func:`forbid_model_requests`,
:func:`model_requests_allowed`) lets library users make real-provider adapters refuse every
non-loopback endpoint, as pydantic-ai's ``ALLOW_MODEL_REQUESTS`` does.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import ipaddress
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from goondan.errors import (
    ConfigError,
    LlmAuthError,
    LlmBadResponseError,
    LlmConnectionError,
    LlmError,
    LlmHttpError,
    LlmRateLimitError,
    LlmTimeoutError,
)
from goondan.llm.base import (
    DeltaCallback,
    FinishReason,
    LanguageModel,
    ModelRequest,
    ModelResponse,
    ModelSpec,
    StreamDelta,
)
from goondan.types import JsonObject, TokenUsage, ToolCall

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "FunctionModel",
    "ModelRequestsForbiddenError",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptStep",
    "ScriptedModel",
    "check_model_request",
    "create_scripted",
    "forbid_model_requests",
    "last_user_text",
    "model_requests_allowed",
    "scripted_from_spec",
]

# str | ModelResponse | dict | BaseException | ScriptStep | Callable[[ModelRequest], item]
ScriptItem = Any

_FINISH_REASONS: tuple[str, ...] = (
    "stop",
    "tool_calls",
    "length",
    "content_filter",
    "error",
    "other",
)
_STREAM_CHUNKS = 3  # enough to prove deltas are concatenated in order, cheap to assert
_ITEM_KEYS = frozenset(
    {"text", "toolCalls", "finishReason", "usage", "delayMs", "error", "when", "steps"}
)


class ScriptExhaustedError(LlmBadResponseError):
    """The scripted model was called more times than its script has replies."""

    code = "E_LLM_SCRIPT_EXHAUSTED"


class ModelRequestsForbiddenError(LlmError):
    """A real-provider request to a non-loopback endpoint while requests are forbidden."""

    code = "E_LLM_REQUESTS_FORBIDDEN"


# -- network guard ---------------------------------------------------------------------------------

ALLOW_MODEL_REQUESTS: bool = True
"""Module-wide switch: set to ``False`` (or use :func:`forbid_model_requests`) in test suites.

The environment variable ``GOONDAN_ALLOW_MODEL_REQUESTS=0`` has the same effect, which also
reaches agent subprocesses."""


def _env_allows() -> bool:
    return os.environ.get("GOONDAN_ALLOW_MODEL_REQUESTS", "1").strip().lower() not in (
        "0", "false", "no", "off",
    )


def _is_loopback_host(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def model_requests_allowed(url: str) -> bool:
    """Whether an adapter may send a request to ``url``: loopback always, others only when
    allowed."""
    host = urlsplit(url).hostname or ""
    if _is_loopback_host(host):
        return True
    return ALLOW_MODEL_REQUESTS and _env_allows()


def check_model_request(url: str) -> None:
    """Raise :class:`ModelRequestsForbiddenError` when :func:`model_requests_allowed` says no."""
    if not model_requests_allowed(url):
        host = urlsplit(url).hostname or url
        raise ModelRequestsForbiddenError(
            f"model requests to {host} are forbidden in this process",
            suggestion="use a ScriptedModel / provider: scripted, point the Model's endpoint at a "
            "loopback server, or allow requests "
            "(ALLOW_MODEL_REQUESTS / GOONDAN_ALLOW_MODEL_REQUESTS)",
        )


@contextmanager
def forbid_model_requests(forbid: bool = True) -> Iterator[None]:
    """Within the block, real-provider adapters refuse non-loopback endpoints (nestable)."""
    global ALLOW_MODEL_REQUESTS
    previous = ALLOW_MODEL_REQUESTS
    ALLOW_MODEL_REQUESTS = not forbid
    try:
        yield
    finally:
        ALLOW_MODEL_REQUESTS = previous


# -- script items ----------------------------------------------------------------------------------


@dataclass
class ScriptStep:
    """A script item with extras: a delay before replying, or a ``when`` rule (regex)."""

    item: ScriptItem
    delay_s: float = 0.0
    when: str | None = None
    steps: list[ScriptItem] | None = None  # a rule's per-step replies within one turn
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.when) if self.when is not None else None


def last_user_text(request: ModelRequest) -> str:
    """Text of the last ``user`` message in the request ("" when there is none)."""
    for message in reversed(request.messages):
        if message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _steps_since_user(request: ModelRequest) -> int:
    """How many model calls of the current turn came before this one (assistant messages after
    the last user message): a rule's ``steps`` are indexed by it."""
    count = 0
    for message in reversed(request.messages):
        role = message.get("role")
        if role == "user":
            break
        if role == "assistant":
            count += 1
    return count


def _last_tool_result(request: ModelRequest) -> Any:
    """The value of the latest tool result of this turn (``None`` when there is none)."""
    for message in reversed(request.messages):
        if message.get("role") == "user":
            return None
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, list):
            continue
        for part in reversed(content):
            if isinstance(part, dict) and part.get("type") == "tool-result":
                output = part.get("output")
                return output.get("value") if isinstance(output, dict) else output
    return None


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


_TOOL_RESULT_FIELD = re.compile(r"\{\{toolResult((?:\.[A-Za-z0-9_-]+)*)\}\}")


def _fill(text: str, request: ModelRequest) -> str:
    # Tiny placeholder language for demos; only expanded when a placeholder is present.
    if "{{" not in text:
        return text
    result = _last_tool_result(request)

    def field(match: re.Match[str]) -> str:
        # ``{{toolResult.a.b}}`` walks object keys; a missing key renders as empty text.
        value = result
        for key in filter(None, match.group(1).split(".")):
            value = value.get(key) if isinstance(value, dict) else None
        return _as_text(value)

    return _TOOL_RESULT_FIELD.sub(field, text.replace("{{input}}", last_user_text(request)))


def _usage_from(data: Any) -> TokenUsage:
    if isinstance(data, TokenUsage):
        return data
    if not isinstance(data, dict):
        raise TypeError(
            "script 'usage' must be an object such as {inputTokens: 10, outputTokens: 2}"
        )

    def pick(*keys: str) -> int | None:
        for key in keys:
            if isinstance(data.get(key), int):
                return int(data[key])
        return None

    inp = pick("inputTokens", "input", "prompt") or 0
    out = pick("outputTokens", "output", "completion") or 0
    total = pick("totalTokens", "total")
    return TokenUsage(
        inp, out, inp + out if total is None else total, pick("cachedTokens", "cached")
    )


_ERROR_CLASSES: dict[str, type[LlmError]] = {
    cls.code: cls
    for cls in (
        LlmAuthError, LlmRateLimitError, LlmTimeoutError, LlmConnectionError, LlmBadResponseError,
    )
}


def _error_from(data: Any) -> LlmError:
    """Build the exception a dict item's ``error`` member describes (for YAML scripts)."""
    if isinstance(data, str):
        data = {"message": data}
    if not isinstance(data, dict):
        raise TypeError("script 'error' must be a string or {code, message, status?}")
    code = str(data.get("code") or "E_LLM_HTTP")
    message = str(data.get("message") or "scripted model error")
    if code == "E_LLM_HTTP":
        return LlmHttpError(message, status=int(data.get("status", 500)))
    cls = _ERROR_CLASSES.get(code)
    if cls is None:
        return LlmError(message, code=code)
    return cls(message)


class _Counter:
    """Tool-call ids ``call_<run>_<n>``: ordered within a model instance and unique across
    processes (``<run>`` is random per instance), because a resumed conversation keeps the
    ids of earlier runs and tool results are matched to calls by id."""

    def __init__(self) -> None:
        self._it = itertools.count(1)
        self.run = os.urandom(3).hex()

    def next_id(self) -> str:
        return f"call_{self.run}_{next(self._it)}"


def _response_from_dict(data: JsonObject, request: ModelRequest, ids: _Counter) -> ModelResponse:
    unknown = set(data) - _ITEM_KEYS
    if unknown:
        raise TypeError(
            f"unknown script item keys: {sorted(unknown)} (allowed: {sorted(_ITEM_KEYS)})"
        )
    if data.get("error") is not None:
        raise _error_from(data["error"])
    calls: list[ToolCall] = []
    for raw in data.get("toolCalls") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise TypeError(
                "each script toolCall needs a string 'name' (and optional 'args', 'id')"
            )
        args = raw.get("args", raw.get("input")) or {}
        if not isinstance(args, dict):
            raise TypeError(f"toolCall {raw['name']!r}: 'args' must be an object")
        # string arguments take the same placeholders as text (a demo can forward {{input}})
        filled = {
            k: _fill(v, request) if isinstance(v, str) else copy.deepcopy(v)
            for k, v in args.items()
        }
        calls.append(ToolCall(str(raw.get("id") or ids.next_id()), raw["name"], filled))
    finish = data.get("finishReason") or ("tool_calls" if calls else "stop")
    if finish not in _FINISH_REASONS:
        raise TypeError(
            f"script finishReason must be one of {list(_FINISH_REASONS)}, not {finish!r}"
        )
    usage = _usage_from(data["usage"]) if data.get("usage") is not None else TokenUsage()
    return ModelResponse(
        text=_fill(str(data.get("text") or ""), request),
        tool_calls=calls,
        finish_reason=cast(FinishReason, finish),
        usage=usage,
        raw_finish_reason=str(finish),
    )


async def _resolve(item: ScriptItem, request: ModelRequest, ids: _Counter) -> ModelResponse:
    """Turn one script item into a response (raising when the item is an exception)."""
    # Callables may return any other item kind, including another callable; bound the depth.
    for _ in range(8):
        if isinstance(item, ScriptStep):
            if item.delay_s > 0:
                await asyncio.sleep(item.delay_s)
            item = item.item
            continue
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            return copy.deepcopy(item)
        if isinstance(item, str):
            return ModelResponse(text=_fill(item, request), raw_finish_reason="stop")
        if isinstance(item, dict):
            delay_ms = item.get("delayMs")
            if isinstance(delay_ms, (int, float)) and delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            return _response_from_dict(item, request, ids)
        if callable(item):
            result = item(request)
            item = await result if inspect.isawaitable(result) else result
            continue
        raise TypeError(f"unsupported script item: {item!r}")
    raise TypeError("script callables nested too deeply")


async def _emit(on_delta: DeltaCallback | None, delta: StreamDelta) -> None:
    if on_delta is None:
        return
    result = on_delta(delta)
    if inspect.isawaitable(result):
        await result


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _stream(response: ModelResponse, on_delta: DeltaCallback | None) -> None:
    """Emit a response as an adapter would: text chunks, then each tool call's deltas."""
    for piece in _split(response.text, _STREAM_CHUNKS):
        await _emit(on_delta, StreamDelta(kind="text", text=piece))
        await asyncio.sleep(0)  # yield like a network read would, so cancellation can land
    for index, call in enumerate(response.tool_calls):
        await _emit(on_delta, StreamDelta(
            kind="tool_call", index=index, tool_call_id=call.id, tool_name=call.name,
        ))
        for piece in _split(json.dumps(call.args, ensure_ascii=False), 2):
            await _emit(on_delta, StreamDelta(kind="tool_call", index=index, args_delta=piece))
        await asyncio.sleep(0)


# -- models ---------------------------------------------------------------------------------------


class _RecordingModel(LanguageModel):
    """Shared parts of the scripted and function models: recording and streaming."""

    def __init__(self, *, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.requests: list[ModelRequest] = []
        self.responses: list[ModelResponse] = []
        self._ids = _Counter()

    @property
    def last_request(self) -> ModelRequest:
        """The most recent request (AssertionError when there was none)."""
        if not self.requests:
            raise AssertionError(f"{self!r} has not been called")
        return self.requests[-1]

    async def _next_item(self, request: ModelRequest) -> ScriptItem:
        raise NotImplementedError

    async def generate(
        self,
        request: ModelRequest,
        *,
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        """Record the request, resolve the next reply and stream it when asked."""
        # A deep copy: the runtime keeps mutating its message lists after the call.
        recorded = copy.deepcopy(request)
        self.requests.append(recorded)
        item = await self._next_item(recorded)
        response = await _resolve(item, recorded, self._ids)
        if response.model is None:
            response.model = self.model
        if stream:
            await _stream(response, on_delta)
        self.responses.append(response)
        return response


class ScriptedModel(_RecordingModel):
    """Replays ``script`` one item per call; records every request in ``requests``."""

    def __init__(
        self,
        script: Sequence[ScriptItem] = (),
        *,
        loop: bool = False,
        delay_s: float = 0.0,
        model: str = "scripted",
        name: str | None = None,
    ) -> None:
        super().__init__(provider="scripted", model=model)
        self.loop = loop
        self.delay_s = delay_s
        self.name = name
        self._rules: list[ScriptStep] = []
        self._sequence: list[ScriptItem] = []
        for item in script:
            self.add(item)
        self._position = 0

    def add(self, *items: ScriptItem) -> ScriptedModel:
        """Append items (rules go to the rule list); returns ``self`` for chaining."""
        for item in items:
            rule = _as_rule(item)
            if rule is not None:
                self._rules.append(rule)
            else:
                self._sequence.append(item)
        return self

    @property
    def remaining(self) -> int:
        """Sequential items not used yet in the current pass through the script."""
        return max(0, len(self._sequence) - self._position)

    def assert_complete(self) -> None:
        """Raise AssertionError when sequential script items were not used."""
        if not self.loop and self.remaining:
            left = self._sequence[self._position :]
            raise AssertionError(
                f"{self!r}: {len(left)} script item(s) not "
                f"used after {len(self.requests)} call(s): "
                f"{left!r}"
            )

    async def _next_item(self, request: ModelRequest) -> ScriptItem:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        if self._rules:
            text, step = last_user_text(request), _steps_since_user(request)
            for rule in self._rules:
                assert rule._pattern is not None
                if rule._pattern.search(text):
                    steps = rule.steps if rule.steps is not None else [rule.item]
                    if step < len(steps):
                        return ScriptStep(steps[step], delay_s=rule.delay_s)
        if self._position >= len(self._sequence):
            if not self.loop or not self._sequence:
                raise ScriptExhaustedError(
                    f"scripted model{f' {self.name!r}' if self.name else ''} has no reply left "
                    f"(call {len(self.requests)}, script of {len(self._sequence)} item(s))",
                    suggestion="add replies to the script, set loop: true, or add a catch-all "
                    "item without 'when'",
                )
            self._position = 0
        item = self._sequence[self._position]
        self._position += 1
        return item

    def __repr__(self) -> str:
        return (
            f"ScriptedModel(model={self.model!r}, calls={len(self.requests)}, "
            f"remaining={self.remaining}, rules={len(self._rules)}, loop={self.loop})"
        )


def _as_rule(item: ScriptItem) -> ScriptStep | None:
    """Return the rule form of ``item`` when it has a ``when`` pattern, else None."""
    if isinstance(item, ScriptStep):
        return item if item.when is not None else None
    if isinstance(item, dict) and item.get("when") is not None:
        rest = {k: v for k, v in item.items() if k not in ("when", "steps", "delayMs")}
        steps = item.get("steps")
        if steps is not None and not isinstance(steps, list):
            raise TypeError("a rule's 'steps' must be a list of script items")
        delay_ms = item.get("delayMs")
        return ScriptStep(
            rest,
            delay_s=float(delay_ms) / 1000 if isinstance(delay_ms, (int, float)) else 0.0,
            when=str(item["when"]),
            steps=list(steps) if steps is not None else None,
        )
    return None


class FunctionModel(_RecordingModel):
    """Computes each reply with ``fn(request)`` (sync or async), returning any script item."""

    def __init__(
        self, fn: Callable[[ModelRequest], Any], *, model: str | None = None
    ) -> None:
        super().__init__(
            provider="function", model=model or str(getattr(fn, "__name__", "function"))
        )
        self.fn = fn

    async def _next_item(self, request: ModelRequest) -> ScriptItem:
        result = self.fn(request)
        return await result if inspect.isawaitable(result) else result

    def __repr__(self) -> str:
        return f"FunctionModel(model={self.model!r}, calls={len(self.requests)})"


# -- provider: scripted -------------------------------------------------------------------------


def _invalid(spec: ModelSpec, message: str, suggestion: str) -> ConfigError:
    where = f"Model/{spec.name}" if spec.name else "scripted Model"
    return ConfigError(f"{where}: {message}", code="E_LLM_SCRIPT_INVALID", suggestion=suggestion)


def _load_script_file(
    spec: ModelSpec, value: Any, base_dir: Path | None
) -> tuple[list[Any], bool | None]:
    import yaml  # lazy: only demos with a script file pay for the import

    if not isinstance(value, str) or not value:
        raise _invalid(
            spec, "options.scriptFile must be a path string", "e.g. scriptFile: ./script.yaml"
        )
    if base_dir is not None:
        # Confined to the bundle like an entry module (docs/testing-models.md).
        from goondan.config.entries import resolve_inside

        inside, reason = resolve_inside(base_dir, value)
        if inside is None:
            raise ConfigError(
                f"Model/{spec.name or 'scripted'}: options.scriptFile: {reason}",
                code="E_CONFIG_PATH_ESCAPE",
                suggestion="use a path relative to the bundle root, inside it",
            )
        path = inside
    else:
        path = Path(value)
        if not path.is_absolute():
            path = Path.cwd() / path
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _invalid(
            spec,
            f"cannot read script file {path}: {exc.strerror or exc}",
            "scriptFile is relative to the bundle root",
        ) from exc
    except yaml.YAMLError as exc:
        raise _invalid(
            spec, f"script file {path} is not valid YAML: {exc}", "fix the YAML syntax"
        ) from exc
    if isinstance(data, dict) and isinstance(data.get("script"), list):
        loop = data.get("loop")
        return data["script"], bool(loop) if loop is not None else None
    if not isinstance(data, list):
        raise _invalid(spec, f"script file {path} must hold a list of items", "write a YAML list")
    return data, None


def _check_items(spec: ModelSpec, items: list[Any]) -> None:
    """Validate the YAML form up front, so a typo fails at load and not mid-conversation."""
    for index, item in enumerate(items):
        where = f"script[{index}]"
        if isinstance(item, str):
            continue
        if not isinstance(item, dict):
            raise _invalid(spec, f"{where} must be a string or a mapping", "e.g. - text: Hello")
        unknown = set(item) - _ITEM_KEYS
        if unknown:
            raise _invalid(
                spec,
                f"{where} has unknown keys {sorted(unknown)}",
                f"allowed keys: {sorted(_ITEM_KEYS)}",
            )
        if item.get("when") is not None:
            try:
                re.compile(str(item["when"]))
            except re.error as exc:
                raise _invalid(
                    spec, f"{where}.when is not a valid regex: {exc}", "fix the pattern"
                ) from exc
        elif "steps" in item:
            raise _invalid(spec, f"{where} has 'steps' without 'when'", "steps belong to a rule")
        if "steps" in item:
            steps = item["steps"]
            if not isinstance(steps, list) or not steps:
                raise _invalid(spec, f"{where}.steps must be a non-empty list", "list the replies")
            _check_items(spec, [s for s in steps if not (isinstance(s, dict) and "when" in s)])
        try:
            # Dry-run the conversion (tool calls, usage, finishReason) on an empty request.
            if item.get("error") is None and "steps" not in item:
                _response_from_dict(
                    {k: v for k, v in item.items() if k not in ("when", "delayMs")},
                    ModelRequest(messages=[]), _Counter(),
                )
        except TypeError as exc:
            raise _invalid(spec, f"{where}: {exc}", "see docs/testing-models.md") from exc


def scripted_from_spec(spec: ModelSpec, base_dir: Path | None = None) -> ScriptedModel:
    """Build the model for a ``provider: scripted`` Model resource from its ``options``.

    ``options.script`` (a list of items) or ``options.scriptFile`` (a YAML list, relative to
    ``base_dir``, the bundle root); ``options.loop`` (bool); ``options.delayMs`` (every reply).
    """
    options = spec.options or {}
    loop_option = options.get("loop")
    if "script" in options and "scriptFile" in options:
        raise _invalid(spec, "options has both script and scriptFile", "keep only one of them")
    if "scriptFile" in options:
        items, file_loop = _load_script_file(spec, options["scriptFile"], base_dir)
        if loop_option is None:
            loop_option = file_loop
    else:
        items = options.get("script", [])
        if not isinstance(items, list):
            raise _invalid(spec, "options.script must be a list", "e.g. script: [{text: Hello}]")
    if loop_option is not None and not isinstance(loop_option, bool):
        raise _invalid(spec, "options.loop must be true or false", "e.g. loop: true")
    delay_ms = options.get("delayMs", 0)
    if not isinstance(delay_ms, (int, float)) or delay_ms < 0:
        raise _invalid(spec, "options.delayMs must be a non-negative number", "e.g. delayMs: 200")
    _check_items(spec, items)
    return ScriptedModel(
        copy.deepcopy(items),
        loop=bool(loop_option),
        delay_s=float(delay_ms) / 1000,
        model=spec.model or "scripted",
        name=spec.name,
    )


def create_scripted(
    spec: ModelSpec, *, retry_policy: Any = None, base_dir: Path | None = None
) -> ScriptedModel:
    """The factory of ``provider: scripted`` (goondan/config/providers.py)."""
    return scripted_from_spec(spec, base_dir)
