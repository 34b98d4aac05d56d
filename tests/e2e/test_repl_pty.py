"""The interactive REPL in a pseudo-terminal: streaming, tool lines, Ctrl-C, slash commands."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import time
from pathlib import Path

import pytest

from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle, goondan_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a pty")]

DEADLINE_S = 20.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A child process on a pty with expect-style reads (deadlines, never fixed sleeps)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # child
            try:
                # Like a shell starting a foreground job: Ctrl-C must reach the child even when
                # the test run itself was started with SIGINT ignored (a background job, nohup).
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.buffer = ""
        self.mark = 0

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, needle: str, timeout: float = DEADLINE_S) -> str:
        """Wait until ``needle`` appears after the previous match; returns the text up to it."""
        deadline = time.monotonic() + timeout
        while True:
            clean = ANSI.sub("", self.buffer)
            index = clean.find(needle, self.mark)
            if index >= 0:
                seen = clean[self.mark : index + len(needle)]
                self.mark = index + len(needle)
                return seen
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{needle!r} not seen; output so far:\n{clean[-2000:]}")
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{needle!r} not seen before EOF:\n{clean[-2000:]}")
                self.buffer += chunk.decode("utf-8", "replace")

    def wait(self, timeout: float = DEADLINE_S) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Keep draining output so the child never blocks on a full pty buffer.
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):
                    self.buffer += os.read(self.fd, 65536).decode("utf-8", "replace")
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"the REPL did not exit:\n{ANSI.sub('', self.buffer)[-1500:]!r}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def test_interactive_session(tmp_path: Path, state_root: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply(text="partial answer", chunks=1, hang_after=2),  # streams, then hangs
            FakeReply.calls(FakeToolCall("calc__add", {"a": 1, "b": 2})),
            FakeReply.reply("the sum is 3"),
        )
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-pty-key", "TERM": "xterm", "COLUMNS": "120"}
        term = Terminal(
            goondan_cmd("repl", "plain", "--bundle", str(bundle), "--instance", "tty"), env
        )
        try:
            term.expect("goondan repl · agent plain · instance tty")
            term.expect("plain> ")

            # Streaming is visible while the provider is still sending, and Ctrl-C cancels.
            term.send("slow question\r")
            term.expect("partial answer")
            term.send("\x03")
            term.expect("(turn cancelled)")
            term.expect("plain> ")
            fake.wait_for_disconnects(1, timeout=DEADLINE_S)  # the request was aborted

            # A tool call shows up as a line with its status, then the answer.
            term.send("add please\r")
            term.expect("✓ calc__add(a=1, b=2)")
            term.expect("the sum is 3")
            term.expect("plain> ")

            term.send("/tools\r")
            term.expect("calc__echo")
            term.expect("plain> ")
            term.send("/history 4\r")
            term.expect("you › add please")
            term.expect("plain> ")
            term.send("/clear\r")
            term.expect("(conversation cleared)")
            term.expect("plain> ")

            term.send("\x04")  # Ctrl-D exits
            assert term.wait() == 0
        finally:
            term.close()

    history = (state_root / "repl" / "history").read_text(encoding="utf-8")
    assert "slow question" in history and "add please" in history
    events = next(state_root.rglob("base.jsonl")).read_text(encoding="utf-8")
    assert events == ""  # /clear was folded into base.jsonl


def test_ctrl_c_twice_at_prompt_exits_and_resume_shows_history(
    tmp_path: Path, state_root: Path
) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.reply("remember me"))
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-pty-key", "TERM": "xterm"}
        argv = goondan_cmd("repl", "plain", "--bundle", str(bundle), "--instance", "again")
        term = Terminal(argv, env)
        try:
            term.expect("plain> ")
            term.send("first words\r")
            term.expect("remember me")
            term.expect("plain> ")
            term.send("\x03")
            term.expect("press Ctrl-C again")
            term.expect("plain> ")
            term.send("\x03")
            assert term.wait() == 130  # left with Ctrl-C: interrupted, as every command
        finally:
            term.close()
        term = Terminal(argv, env)
        try:
            term.expect("resuming conversation (2 messages)")
            term.expect("you › first words")
            term.expect("remember me")
            term.expect("plain> ")
            term.send("/exit\r")
            assert term.wait() == 0
        finally:
            term.close()
