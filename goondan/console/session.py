"""The interactive chat loop and the line-per-turn batch mode of ``goondan repl``.

:class:`ReplSession` reads entries with :class:`~goondan.console.prompt.LineReader`, runs each
as a turn through a :class:`~goondan.console.backend.ReplBackend` on an ``asyncio.Runner`` and
renders it with :class:`~goondan.console.render.TurnRenderer`. Keys:

* Ctrl-C while a turn runs cancels it (the runner's SIGINT handler cancels the task; the
  runtime aborts the model request and repairs the conversation) and returns to the prompt;
* Ctrl-C at the prompt clears the line; a second Ctrl-C in a row, or Ctrl-D, exits.

:func:`run_batch` is the non-TTY mode: each input line is one turn and only answers (or, with
``as_json``, one TurnResult JSON object per line) go to stdout; errors go to stderr.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

from goondan.console.backend import ReplBackend
from goondan.console.prompt import LineReader
from goondan.console.render import Style, TurnRenderer, format_turn_error, short_args
from goondan.conversation.messages import Message
from goondan.errors import EXIT_INTERRUPTED, exit_code_of
from goondan.pipeline.context import TurnResult
from goondan.secrets import mask

__all__ = [
    "SLASH_COMMANDS",
    "ReplSession",
    "format_mcp_status",
    "format_message",
    "keep_signals_on_main_thread",
    "result_json",
    "run_batch",
    "run_once",
]

def keep_signals_on_main_thread(
    runner: asyncio.Runner, signals: Iterable[signal.Signals] = (signal.SIGINT,)
) -> None:
    """Block ``signals`` in the runner's worker threads so the kernel delivers them to the main
    thread: a signal caught by an idle worker would leave ``input()`` asleep until Enter."""
    from concurrent.futures import ThreadPoolExecutor

    blocked = set(signals)

    def block() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)

    loop = runner.get_loop()
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="goondan", initializer=block))


SLASH_COMMANDS: dict[str, str] = {
    "/help": "show this help",
    "/exit": "leave the REPL (also Ctrl-D, or Ctrl-C twice)",
    "/history [n]": "show the last n messages of the conversation (default 10)",
    "/tools": "list the tools the agent can call",
    "/instance": "show the agent, instance key, storage directory and model",
    "/usage": "token usage of this session",
    "/fold": "fold pending conversation events into base.jsonl now",
    "/clear": "empty the conversation (recorded as a truncate event)",
}
RESUME_EXCHANGES = 3


def format_message(message: Message, style: Style, *, limit: int = 400) -> str | None:
    """One display line (or block) for a conversation message; None for empty ones."""
    text = mask(message.text.strip())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    role = message.role
    if role == "user":
        return f"{style.bold('you ›')} {text}" if text else None
    if role == "assistant":
        calls = message.tool_calls
        parts = [text] if text else []
        parts.extend(style.dim(f"  → {c.name}({short_args(c.args)})") for c in calls)
        return "\n".join(parts) if parts else None
    if role == "tool":
        content = message.data.get("content")
        lines = []
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "tool-result":
                output = part.get("output") or {}
                ok = output.get("type") != "error-json"
                value = json.dumps(output.get("value"), ensure_ascii=False, default=str)
                mark = style.green("✓") if ok else style.red("✗")
                lines.append(style.dim(f"  {mark} {part.get('toolName')} ← {mask(value)[:80]}"))
        return "\n".join(lines) if lines else None
    return style.dim(f"[{role}] {text}") if text else None


def result_json(result: TurnResult) -> str:
    """The ``--json`` line of a turn: ``TurnResult.to_dict()`` plus trace id and usage."""
    data = result.to_dict()
    for key in ("traceId", "tokenUsage", "stepCount", "toolCallCount"):
        if key in result.metadata:
            data[key] = result.metadata[key]
    return mask(json.dumps(data, ensure_ascii=False, default=str))


def exit_code_for(result: TurnResult) -> int:
    """The process exit code of a turn: 0, or the exit code of the failed turn's error class
    (:func:`goondan.errors.exit_code_of`: 5 network, 6 auth, 130 cancelled, ...)."""
    if result.error is None:
        return 0
    return exit_code_of(str(result.error.get("code") or ""))


@dataclass
class _Turn:
    result: TurnResult | None
    cancelled: bool


async def _observed_turn(backend: ReplBackend, renderer: TurnRenderer, text: str) -> TurnResult:
    renderer.start_turn()
    unsubscribe = backend.subscribe(renderer.handle)
    try:
        return await backend.run_turn(text)
    finally:
        unsubscribe()


def run_once(
    backend: ReplBackend,
    runner: asyncio.Runner,
    text: str,
    renderer: TurnRenderer,
) -> TurnResult:
    """Run and render one turn (``--input`` on a terminal); Ctrl-C raises KeyboardInterrupt."""
    try:
        result = runner.run(_observed_turn(backend, renderer, text))
    except (KeyboardInterrupt, asyncio.CancelledError):
        renderer.cancelled()
        raise KeyboardInterrupt from None
    renderer.end_turn(result)
    return result


def run_batch(
    backend: ReplBackend,
    runner: asyncio.Runner,
    lines: Iterable[str],
    *,
    out: IO[str],
    err: IO[str],
    as_json: bool = False,
) -> int:
    """Non-interactive mode: one turn per non-empty line; returns the exit code."""
    code = 0
    for raw in lines:
        text = raw.rstrip("\r\n")
        if not text.strip():
            continue
        result = runner.run(backend.run_turn(text))
        if as_json:
            out.write(result_json(result) + "\n")
        elif result.finish_reason == "approval_pending":  # decided later: goondan approvals
            for row in result.metadata.get("approvals") or []:
                out.write(mask(f"waiting for approval {row.get('id')}: {row.get('tool')} "
                               f"{json.dumps(row.get('args'), ensure_ascii=False)}") + "\n")
        elif result.error is None:
            out.write(mask(result.text) + "\n")
        if result.error is not None:
            if not as_json:
                err.write("\n".join(filter(None, format_turn_error(result.error))) + "\n")
            code = exit_code_for(result)
        out.flush()
    return code


class ReplSession:
    """The interactive loop: prompt, slash commands, rendered turns, clean cancellation."""

    def __init__(
        self,
        backend: ReplBackend,
        runner: asyncio.Runner,
        *,
        reader: LineReader,
        out: IO[str],
        color: bool = False,
        stream: bool = True,
        banner: str | None = None,
        quiet: bool = False,
    ) -> None:
        self.backend = backend
        self.quiet = quiet  # -q: no banner, help line or resume transcript, only the chat
        self.runner = runner
        self.reader = reader
        self.out = out
        self.style = Style(color)
        self.banner = banner
        self.renderer = TurnRenderer(out, color=color, tty=True, stream=stream)
        self.prompt = f"{backend.agent_name}> "
        self._commands: dict[str, Callable[[list[str]], bool]] = {
            "/help": self._help,
            "/exit": self._exit,
            "/quit": self._exit,
            "/history": self._history,
            "/tools": self._tools,
            "/instance": self._instance,
            "/usage": self._usage,
            "/fold": self._fold,
            "/clear": self._clear,
        }

    def print(self, text: str = "") -> None:
        """Write one line to the session's output."""
        self.out.write(text + "\n")
        self.out.flush()

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> int:
        """Run until /exit, Ctrl-D or a second Ctrl-C; returns the exit code: 0, or 130 (as every
        command interrupted by Ctrl-C) when a second Ctrl-C ended the session."""
        self._welcome()
        armed = False  # the previous key was Ctrl-C: another one exits
        while True:
            try:
                entry = self.reader.read(self.prompt)
            except EOFError:
                self.print()
                return 0
            except KeyboardInterrupt:
                if armed:
                    self.print()
                    return EXIT_INTERRUPTED
                armed = True
                try:
                    self.print()
                    self.print(self.style.dim("(press Ctrl-C again or Ctrl-D to exit)"))
                except KeyboardInterrupt:  # the second Ctrl-C came before the next prompt
                    return EXIT_INTERRUPTED
                continue
            armed = False
            if not entry.strip():
                continue
            if entry.lstrip().startswith("/"):
                if not self._slash(entry.strip()):
                    return 0
                continue
            armed = self._turn(entry).cancelled

    def _turn(self, text: str) -> _Turn:
        try:
            result = self.runner.run(_observed_turn(self.backend, self.renderer, text))
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.renderer.cancelled()
            return _Turn(None, True)
        self.renderer.end_turn(result)
        while result.finish_reason == "approval_pending" and hasattr(self.backend, "decide"):
            decided = self._ask_approvals(result)  # docs/approvals.md: the repl asks inline
            if decided is None:
                break
            result = decided
        return _Turn(result, False)

    def _ask_approvals(self, result: TurnResult) -> TurnResult | None:
        """Ask about each pending approval: approve, deny (with a reason) or show the arguments;
        the decision resumes the turn. None: left undecided (Ctrl-C / Ctrl-D / empty answer)."""
        for row in result.metadata.get("approvals") or []:
            self.print(
                self.style.yellow(
                    mask(
                        f"{row.get('tool')} waits for approval ({row.get('id')})"
                        + (f": {row.get('reason')}" if row.get("reason") else "")
                    )
                )
            )
            while True:
                try:
                    answer = (
                        self.reader.read("approve? [y]es / [n]o / [s]how args / [l]ater: ")
                        .strip()
                        .lower()
                    )
                    if answer in ("s", "show"):
                        self.print(mask(json.dumps(row.get("args"), ensure_ascii=False, indent=2)))
                        continue
                    if answer in ("y", "yes", "n", "no"):
                        reason = (
                            None
                            if answer.startswith("y")
                            else self.reader.read("reason: ").strip() or None
                        )
                        decide = self.backend.decide(  # type: ignore[attr-defined]
                            str(row.get("id")), approve=answer.startswith("y"), reason=reason
                        )
                        return self._resumed(decide)
                except (EOFError, KeyboardInterrupt):
                    self.print()
                self.print(
                    self.style.dim(
                        "left pending: goondan approvals approve|deny " + str(row.get("id"))
                    )
                )
                return None
        return None

    def _resumed(self, decide: Any) -> TurnResult | None:
        self.renderer.start_turn()
        unsubscribe = self.backend.subscribe(self.renderer.handle)
        try:
            result: TurnResult = self.runner.run(decide)
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.renderer.cancelled()
            return None
        finally:
            unsubscribe()
        self.renderer.end_turn(result)
        return result

    def _welcome(self) -> None:
        if self.quiet:
            return
        info = self.backend.describe()
        title = self.banner or (
            f"goondan repl · agent {info.get('agent')} · instance {info.get('instance')}"
            + (f" · {info['model']}" if "model" in info else "")
        )
        self.print(self.style.bold(title))
        self.print(
            self.style.dim(
                "Type /help for commands; end a line with "
                '\\ or use """ for multi-line; Ctrl-D exits.'
            )
        )
        messages = self.backend.messages()
        if messages:
            self._show_resume(messages)

    def _show_resume(self, messages: list[Message]) -> None:
        starts = [i for i, m in enumerate(messages) if m.role == "user"]
        first = (
            starts[-RESUME_EXCHANGES]
            if len(starts) >= RESUME_EXCHANGES
            else (starts[0] if starts else 0)
        )
        shown = [m for m in messages[first:] if m.role in ("user", "assistant")]
        self.print(self.style.dim(f"── resuming conversation ({len(messages)} messages) ──"))
        for message in shown:
            line = format_message(message, self.style, limit=200)
            if line:
                self.print(line)
        self.print(self.style.dim("──"))

    # -- slash commands ----------------------------------------------------------------------------
    def _slash(self, entry: str) -> bool:
        """Run a slash command; returns False when the session should end."""
        name, *args = entry.split()
        handler = self._commands.get(name.lower())
        if handler is None:
            self.print(self.style.red(f"unknown command {name}; type /help"))
            return True
        try:
            return handler(args)
        except KeyboardInterrupt:
            self.print(self.style.yellow("(interrupted)"))
            return True
        except Exception as exc:  # keep the session alive on a command's failure
            code = getattr(exc, "code", type(exc).__name__)
            self.print(self.style.red(mask(f"[{code}] {exc}")))
            return True

    def _help(self, args: list[str]) -> bool:
        width = max(len(k) for k in SLASH_COMMANDS)
        for command, text in SLASH_COMMANDS.items():
            self.print(f"  {command.ljust(width)}  {self.style.dim(text)}")
        self.print(
            self.style.dim('  multi-line: end a line with \\, or wrap the text in """ ... """')
        )
        return True

    def _exit(self, args: list[str]) -> bool:
        return False

    def _history(self, args: list[str]) -> bool:
        count = int(args[0]) if args and args[0].isdigit() else 10
        messages = self.backend.messages()
        if not messages:
            self.print(self.style.dim("(the conversation is empty)"))
        for message in messages[-count:]:
            line = format_message(message, self.style)
            if line:
                self.print(line)
        return True

    def _tools(self, args: list[str]) -> bool:
        items = self.backend.tools()
        if not items:
            self.print(self.style.dim("(no tools)"))
        for item in items:
            description = item.description.strip().splitlines()[0] if item.description else ""
            self.print(f"  {self.style.cyan(item.name)}  {self.style.dim(description)}")
        servers = getattr(self.backend, "mcp_servers", None)
        for status in servers() if callable(servers) else []:
            self.print(f"  {self.style.dim('mcp')} {format_mcp_status(status)}")
        return True

    def _instance(self, args: list[str]) -> bool:
        for key, value in self.backend.describe().items():
            self.print(f"  {key:<10} {value}")
        return True

    def _usage(self, args: list[str]) -> bool:
        turns, usage = self.backend.usage()
        line = (
            f"  turns {turns} · prompt {usage.input_tokens} · completion {usage.output_tokens}"
            f" · total {usage.total_tokens}"
        )
        if usage.cached_tokens is not None:
            line += f" · cached {usage.cached_tokens}"
        cost = getattr(self.backend, "cost", None)
        spent = cost() if callable(cost) else None
        if spent is not None:
            line += f" · cost ${spent:.6f}"
        if usage.unknown_calls:
            # Counted apart: a call whose server reported no usage is unknown, not zero tokens.
            line += (
                f" · unknown for {usage.unknown_calls} model call(s) (the server reported no usage)"
            )
        self.print(line)
        return True

    def _fold(self, args: list[str]) -> bool:
        count = self.runner.run(self.backend.fold())
        self.print(self.style.dim(f"(folded; {count} messages in base.jsonl)"))
        return True

    def _clear(self, args: list[str]) -> bool:
        self.runner.run(self.backend.clear())
        self.print(self.style.dim("(conversation cleared)"))
        return True


def format_mcp_status(status: dict[str, Any]) -> str:
    """One line per MCP server for ``/tools`` (docs/mcp.md "Server state")."""
    state = str(status.get("state"))
    where = f"pid {status['pid']}" if status.get("pid") else str(status.get("target", ""))
    line = f"{status.get('name')}  {state} · {status.get('transport')} {where}"
    if state == "ready":
        line += f" · {status.get('tools', 0)} tool(s) · sessions {status.get('sessionsStarted', 0)}"
    elif state == "idle":
        line += " · starts at the first step"
    if status.get("lastError") and state != "ready":
        line += f" · last error: {status['lastError']}"
    return line
