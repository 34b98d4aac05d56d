"""Terminal rendering of a running turn: streamed text, tool lines, a spinner, the answer.

:class:`TurnRenderer` consumes runtime event payloads (``{"type": "llm.delta", ...}``,
``tool.called`` ... — see ``docs/runtime.md``), so it works the same for an in-process
:class:`~goondan.runtime.AgentInstance` and for a remote agent whose events arrive over IPC.

On a TTY a spinner runs while the model thinks or a tool runs; streamed text appears as it
arrives; each tool call becomes one line once it finishes::

      ✓ units__convert(value=12, from="km", to="mi")  0.4 ms
      ✗ files__read(path="x")  E_TOOL_FAILED: no such file  1.2 ms

Without a TTY there is no spinner and no cursor movement, only whole lines.
"""

from __future__ import annotations

import asyncio
import json
from typing import IO, Any

from goondan.errors import help_url
from goondan.pipeline.context import TurnResult
from goondan.secrets import StreamMasker, mask
from goondan.types import JsonObject

__all__ = ["Style", "TurnRenderer", "format_turn_error", "short_args"]

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPINNER_INTERVAL_S = 0.08
ARGS_LIMIT = 60


class Style:
    """ANSI styling that degrades to plain text when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)


def short_args(args: Any, limit: int = ARGS_LIMIT) -> str:
    """``key=value, ...`` with JSON values, cut to ``limit`` characters."""
    if not isinstance(args, dict):
        text = json.dumps(args, ensure_ascii=False, default=str)
    else:
        text = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in args.items()
        )
    text = mask(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_turn_error(error: dict[str, Any]) -> list[str]:
    """The lines of a failed turn, secrets masked: ``[CODE] message``, ``  suggestion: ...`` (when
    there is one) and ``  help: <url>``, as the CLI prints its own errors."""
    code = str(error.get("code") or "E_TURN_FAILED")
    lines = [mask(f"[{code}] {error.get('message', '')}")]
    suggestion = error.get("suggestion")
    if suggestion:
        lines.append(mask(f"  suggestion: {suggestion}"))
    lines.append(f"  help: {error.get('helpUrl') or help_url(code)}")
    return lines


def _ms(value: Any) -> str:
    try:
        ms = float(value)
    except (TypeError, ValueError):
        return ""
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


class TurnRenderer:
    """Renders the events of one turn at a time to ``out``."""

    def __init__(
        self,
        out: IO[str],
        *,
        color: bool = False,
        tty: bool = False,
        stream: bool = True,
        show_tools: bool = True,
    ) -> None:
        self.out = out
        self.style = Style(color)
        self.tty = tty
        self.stream = stream
        self.show_tools = show_tools
        self._column = 0  # characters written on the current line
        self._streamed = False
        self._spinner_label: str | None = None
        self._spinner_task: asyncio.Task[None] | None = None
        self._spinner_shown = False
        self._pending_tools: dict[str, JsonObject] = {}
        # Streamed deltas may split a secret: the end that could start one is held back.
        self._masker = StreamMasker()

    # -- turn lifecycle ------------------------------------------------------------------------
    def start_turn(self) -> None:
        """Reset per-turn state and start the spinner (TTY only; needs a running loop)."""
        self._streamed = False
        self._pending_tools.clear()
        self._set_spinner("thinking")
        if self.tty and self._spinner_task is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._spinner_task = loop.create_task(self._spin())

    def end_turn(self, result: TurnResult | None) -> None:
        """Stop the spinner; print the answer unless it was streamed whole, or the error."""
        self._stop_spinner()
        if result is not None:
            # eventsDropped: the orchestrator cut the stream of a client that did not read
            cut = bool(result.metadata.get("eventsDropped"))
            if result.error is not None:
                self._line_break()
                headline, *details = format_turn_error(result.error)
                self._write(self.style.red(headline) + "\n")
                for line in details:
                    self._write(line + "\n")
            elif not self._streamed or not self.stream or cut:
                self._line_break()
                text = result.text
                if text:
                    self._write(mask(text) + "\n")
            if result.finish_reason == "max_steps" and self._streamed and self.stream and not cut:
                # The closing note was appended by the runtime, not streamed by the model.
                self._line_break()
                self._write(self.style.yellow(mask(result.text)) + "\n")
        self._line_break()
        self.out.flush()

    def cancelled(self) -> None:
        """Show that the running turn was cancelled."""
        self._stop_spinner()
        self._line_break()
        self._write(self.style.yellow("(turn cancelled)") + "\n")
        self.out.flush()

    # -- events --------------------------------------------------------------------------------
    def handle(self, event: JsonObject) -> None:
        """Consume one runtime event payload."""
        kind = event.get("type")
        if kind == "llm.delta":
            if event.get("kind") == "text" and self.stream:
                text = str(event.get("text") or "")
                if text:
                    self._clear_spinner()
                    self._spinner_label = None
                    self._write(self._masker.feed(text))
                    self._streamed = True
            return
        self._write(self._masker.flush())  # the streamed text ended: show what was held back
        if kind == "step.started":
            if int(event.get("stepIndex") or 0) > 0:
                self._set_spinner("thinking")
        elif kind == "tool.called":
            self._pending_tools[str(event.get("toolCallId"))] = event
            name = str(event.get("toolName"))
            self._set_spinner(f"{name}({short_args(event.get('args'), 40)})")
        elif kind in ("tool.completed", "tool.failed"):
            called = self._pending_tools.pop(str(event.get("toolCallId")), {})
            if self.show_tools:
                self._tool_line(event, called.get("args"))
            if self._pending_tools:
                pending = next(iter(self._pending_tools.values()))
                self._set_spinner(str(pending.get("toolName")))
            else:
                self._set_spinner("thinking")
        elif kind == "step.completed":
            self._set_spinner(None)

    def _tool_line(self, event: JsonObject, args: Any) -> None:
        ok = event.get("type") == "tool.completed"
        mark = self.style.green("✓") if ok else self.style.red("✗")
        name = self.style.cyan(str(event.get("toolName")))
        parts = [f"  {mark} {name}({short_args(args)})"]
        if not ok:
            code = event.get("errorCode") or "E_TOOL"
            message = str(event.get("errorMessage") or "")
            parts.append(self.style.red(mask(f"{code}: {message}")[:100]))
        parts.append(self.style.dim(_ms(event.get("latencyMs"))))
        self._clear_spinner()
        self._line_break()
        self._write("  ".join(parts) + "\n")

    # -- output primitives ---------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        last_newline = text.rfind("\n")
        self._column = (
            len(text) - last_newline - 1 if last_newline >= 0 else self._column + len(text)
        )
        self.out.flush()

    def _line_break(self) -> None:
        self._clear_spinner()
        self._write(self._masker.flush())
        if self._column:
            self._write("\n")

    # -- spinner -------------------------------------------------------------------------------
    def _set_spinner(self, label: str | None) -> None:
        self._spinner_label = label
        if label is None:
            self._clear_spinner()

    def _clear_spinner(self) -> None:
        if self._spinner_shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self._spinner_shown = False

    def _stop_spinner(self) -> None:
        self._spinner_label = None
        task, self._spinner_task = self._spinner_task, None
        if task is not None:
            task.cancel()
        self._clear_spinner()

    async def _spin(self) -> None:
        index = 0
        try:
            while True:
                label = self._spinner_label
                # Only draw on an empty line, never over streamed text.
                if label is not None and self._column == 0:
                    frame = SPINNER_FRAMES[index % len(SPINNER_FRAMES)]
                    self.out.write(f"\r{self.style.cyan(frame)} {self.style.dim(label)}\x1b[K")
                    self.out.flush()
                    self._spinner_shown = True
                index += 1
                await asyncio.sleep(SPINNER_INTERVAL_S)
        except asyncio.CancelledError:
            pass
