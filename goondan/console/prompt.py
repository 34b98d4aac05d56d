"""Reading user input: readline editing, persistent history, multi-line entries.

Multi-line input, two ways:

* end a line with a backslash ``\\`` to continue on the next line;
* type ``\"\"\"`` alone (or at the start of a line) to open a block, and ``\"\"\"`` again to close
  it.

The history file lives under the state root (``<state root>/repl/history``), never in the
home directory, so the REPL works with a read-only home. Each entry is saved as soon as it is
entered, so a crash loses nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from goondan.text import clean_bytes, clean_text
from goondan.workspace.files import private_dirs, private_opener

__all__ = [
    "HISTORY_LIMIT",
    "NUDGE_S",
    "SHOWN_EVENTS",
    "AbovePromptHandler",
    "LineReader",
    "iter_input_lines",
    "join_multiline",
    "wake_for_signals",
]

HISTORY_LIMIT = 1000
BLOCK = '"""'
# While the prompt waits: how often the main thread is woken to act on a pending Ctrl-C, and
# with which signal (default action "ignore", not used by goondan, Python or readline).
NUDGE_S = 0.2
NUDGE_SIGNAL: signal.Signals | None = getattr(signal, "SIGURG", None)


def join_multiline(first: str, read_more: Callable[[], str]) -> str:
    """Complete ``first`` into a full entry, calling ``read_more()`` for continuation lines."""
    stripped = first.strip()
    if stripped.startswith(BLOCK):
        rest = stripped[len(BLOCK):]
        if rest.endswith(BLOCK) and len(rest) >= len(BLOCK):
            return rest[: -len(BLOCK)]
        lines = [rest] if rest else []
        while True:
            line = read_more()
            if line.rstrip().endswith(BLOCK):
                last = line.rstrip()[: -len(BLOCK)]
                if last:
                    lines.append(last)
                return "\n".join(lines)
            lines.append(line)
    lines = []
    line = first
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = read_more()
    lines.append(line)
    return "\n".join(lines)


def iter_input_lines(stream: IO[str]) -> Iterator[str]:
    """The lines of piped input without their line ends, invalid UTF-8 read as U+FFFD
    (docs/security.md): the bytes are decoded here, never by the text layer's error handler."""
    raw = getattr(stream, "buffer", None)
    if raw is not None:
        for data in raw:
            yield clean_bytes(data).rstrip("\r\n")
        return
    for line in stream:
        yield clean_text(line).rstrip("\r\n")


@contextlib.contextmanager
def wake_for_signals(interval: float = NUDGE_S) -> Iterator[None]:
    """While ``input()`` waits, make sure a Ctrl-C is acted on (within ``interval`` seconds).

    CPython's readline loop prints the prompt and only then blocks in ``select()``; Python
    handles a signal there only when ``select()`` fails with ``EINTR``. A Ctrl-C that lands in
    between (likely on a loaded machine: the prompt's write wakes whoever reads the terminal)
    is recorded but not acted on until the next key press — the prompt ignores Ctrl-C. So a
    helper thread sends the main thread a no-op :data:`NUDGE_SIGNAL` every ``interval``: each
    one interrupts ``select()``, Python runs any pending handler (SIGINT → KeyboardInterrupt),
    and readline carries on otherwise unchanged. Only on the main thread of a process reading a
    terminal; elsewhere this does nothing.
    """
    wake = NUDGE_SIGNAL
    if (wake is None or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "pthread_kill") or not sys.stdin.isatty()):
        yield
        return
    previous = signal.signal(wake, _ignore)
    stop = threading.Event()
    main = threading.main_thread().ident
    assert main is not None

    def nudge() -> None:
        # Ctrl-C must keep going to the main thread, never to this one.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, wake})
        while not stop.wait(interval):
            signal.pthread_kill(main, wake)

    thread = threading.Thread(target=nudge, name="goondan-prompt-wake", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        # NUDGE_SIGNAL's default action is "ignore", so a nudge still in flight is harmless.
        signal.signal(wake, previous if previous is not None else signal.SIG_DFL)


def _ignore(signum: int, frame: Any) -> None:
    """The no-op handler that makes :data:`NUDGE_SIGNAL` interrupt ``select()``."""


class LineReader:
    """``input()`` with readline editing (when available) and a history file."""

    def __init__(self, history_file: Path | None, *, limit: int = HISTORY_LIMIT) -> None:
        self.history_file = history_file
        self._readline: Any = None
        self._waiting: str | None = None  # the prompt shown while input() waits
        self._print_lock = threading.Lock()
        # A terminal may send bytes that are not UTF-8: read them as surrogates (never an
        # exception) and turn those into U+FFFD in read().
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stdin.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
        try:
            import readline

            self._readline = readline
        except ImportError:  # pragma: no cover - e.g. Windows without pyreadline
            return
        readline.set_history_length(limit)
        with contextlib.suppress(Exception):
            # Editing keys stay usual even under libedit (macOS).
            readline.parse_and_bind("tab: complete")
        if history_file is not None and history_file.exists():
            with contextlib.suppress(OSError):
                readline.read_history_file(str(history_file))

    def read(self, prompt: str, continuation: str = "... ") -> str:
        """One complete entry (raises ``EOFError`` on Ctrl-D, ``KeyboardInterrupt`` on Ctrl-C)."""
        physical = 1

        def more() -> str:
            nonlocal physical
            physical += 1
            self._waiting = continuation
            return input(continuation)

        with wake_for_signals():
            self._waiting = prompt
            try:
                first = input(prompt)
                entry = clean_text(join_multiline(first, more))
            finally:
                self._waiting = None
        if entry.strip():
            self._persist(physical)
        return entry

    def print_above(self, text: str, out: IO[str] | None = None) -> None:
        """Print ``text`` (from any thread) above the prompt: while ``input()`` waits, the prompt
        line is cleared, the text printed, and the prompt redrawn with what was typed so far."""
        out = out or sys.stdout
        with self._print_lock:
            prompt = self._waiting
            if prompt is None:
                out.write(text + "\n")
            else:
                typed = ""
                if self._readline is not None:
                    with contextlib.suppress(Exception):
                        typed = self._readline.get_line_buffer()
                out.write("\r\x1b[K" + text + "\n" + prompt + typed)
            out.flush()

    def _persist(self, lines: int) -> None:
        # readline already keeps each physical line in memory; mirror them to the file now.
        readline = self._readline
        if readline is None or self.history_file is None:
            return
        with contextlib.suppress(OSError):
            private_dirs(self.history_file.parent)
            if not self.history_file.exists():  # what was typed may hold a key: 0600
                os.close(private_opener(str(self.history_file), os.O_WRONLY | os.O_CREAT))
            readline.append_history_file(lines, str(self.history_file))

    def history(self, limit: int = 20) -> list[str]:
        """The most recent ``limit`` entries, oldest first."""
        readline = self._readline
        if readline is None:
            return []
        length = readline.get_current_history_length()
        items = [
            readline.get_history_item(i) for i in range(max(1, length - limit + 1), length + 1)
        ]
        return [item for item in items if item]


# Background records worth a line in the chat besides warnings and errors (docs/orchestrator.md).
SHOWN_EVENTS = frozenset({"orchestrator.bundleReloaded", "orchestrator.agentStartError"})


class AbovePromptHandler(logging.Handler):
    """Shows background log records (warnings, errors, watch reloads) above the chat prompt,
    without overwriting what the user is typing (:meth:`LineReader.print_above`)."""

    def __init__(
        self, reader: LineReader, *, color: bool = False, out: IO[str] | None = None
    ) -> None:
        super().__init__(logging.INFO)
        self.reader = reader
        self.color = color
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and getattr(record, "event", None) not in SHOWN_EVENTS:
            return
        try:
            from goondan.secrets import mask

            level = "" if record.levelno < logging.WARNING else record.levelname.lower() + ": "
            text = mask(f"· {level}{record.getMessage()}")
            if self.color:
                code = (
                    "33"
                    if record.levelno == logging.WARNING
                    else "31"
                    if record.levelno > logging.WARNING
                    else "2"
                )
                text = f"\x1b[{code}m{text}\x1b[0m"
            self.reader.print_above(text, self.out)
        except Exception:  # logging must never break the chat
            self.handleError(record)
