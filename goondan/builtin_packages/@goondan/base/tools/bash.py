"""Tool ``bash`` of ``@goondan/base``: run shell commands and scripts (docs/base-package.md).

Exports:

* ``exec``: ``/bin/sh -lc <command>`` in ``cwd`` (relative to the workdir, default the workdir);
* ``script``: ``<shell> <path> …args`` in the workdir (``shell`` defaults to ``/bin/bash``).

Both take ``timeoutMs`` (default 30000), ``env`` (primitive values) and ``keepBackground``
(default false). A non-zero exit status is an output, not an error. The child runs in its own
session (process group) so a timeout reaches every process it started: the group gets
SIGTERM, then SIGKILL 100 ms later; ``exitCode`` is ``-1`` and ``signal`` names the signal
when the child was killed. When the command ends normally, what it left running in its group
(``sleep 600 &``) is stopped the same way, unless ``keepBackground`` is true: then the jobs
live on until the agent process stops (:mod:`goondan.tools.processes`). A job that starts its
*own* session (``setsid``) leaves the group; on Linux it is still found and killed through
the ``GOONDAN_TOOL_CALL`` marker every command's environment carries (``/proc``), unless it
also cleared its environment (docs/base-package.md). Its open pipes never hold the call longer
than ``DRAIN_GRACE_S`` after the kill.

Environment (docs/base-package.md, "bash environment"): the child does not inherit goondan's
environment, where the provider API keys live. It gets only the variables named in
``PASS_ENV_DEFAULT`` and the Tool config's ``passEnv`` list (names or ``fnmatch`` patterns), the
config's fixed ``env`` mapping, then the call's ``env`` argument. An inherited variable whose
value is a registered secret is dropped unless ``passEnv`` names it exactly.

Output: each of stdout and stderr is read up to half the call's output cap
(``ctx.max_output_bytes``, docs/tools.md); the rest is read and counted, never kept, so a
command printing 500 MB costs no memory. ``truncated`` is true when something was dropped and
the kept text ends with ``…[truncated N bytes]``.

The handlers are ``async`` and use asyncio subprocesses, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fnmatch
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from goondan.secrets import is_secret, mask_cut
from goondan.tools import ToolContext, ToolFailure
from goondan.tools.processes import owner_env, stop_group, sweep

from ._inputs import absolute, flag, invalid, primitive, required_text

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_SHELL = "/bin/bash"
KILL_GRACE_S = 0.1
# After the child exited (or was killed), how long to wait for its pipes to close: a process
# that left the group (setsid) may keep them open forever.
DRAIN_GRACE_S = 1.0
PASS_ENV_DEFAULT = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*",
                    "TERM", "TZ", "TMPDIR")
_CHUNK = 65536
# Set in every command's environment so a job that escaped the process group can be found.
CALL_MARKER_ENV = "GOONDAN_TOOL_CALL"


def _optional_text(input: dict[str, Any], name: str) -> str | None:
    value = input.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise invalid(f"'{name}' must be a string")
    return value


def _timeout_ms(input: dict[str, Any]) -> float:
    value = input.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if value is None:
        return DEFAULT_TIMEOUT_MS
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise invalid("'timeoutMs' must be a positive number")
    return float(value)


def _config_strings(config: Any, name: str) -> list[str]:
    value = config.get(name) if hasattr(config, "get") else None
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def base_env(config: Any, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a command starts from: the allow-listed part of ``environ`` (default
    ``os.environ``) plus the Tool config's fixed ``env``."""
    source = os.environ if environ is None else environ
    patterns = [*PASS_ENV_DEFAULT, *_config_strings(config, "passEnv")]
    exact = set(_config_strings(config, "passEnv"))
    merged: dict[str, str] = {}
    for key, value in source.items():
        if not any(fnmatch.fnmatchcase(key, p) for p in patterns):
            continue
        if key not in exact and is_secret(value):
            continue  # a resolved API key or connection secret stays with goondan
        merged[key] = value
    fixed = config.get("env") if hasattr(config, "get") else None
    if isinstance(fixed, dict):
        merged.update(
            {str(k): primitive(v) for k, v in fixed.items() if isinstance(v, str | int | float)}
        )
    return merged


def _env(ctx: ToolContext, input: dict[str, Any]) -> dict[str, str]:
    value = input.get("env")
    merged = base_env(getattr(ctx, "config", {}) or {})
    if value is None:
        return merged
    if not isinstance(value, dict):
        raise invalid("'env' must be an object of string, number or boolean values")
    for key, item in value.items():
        if item is None:
            continue
        if not isinstance(item, str | int | float):
            raise invalid(f"'env.{key}' must be a string, number or boolean")
        merged[str(key)] = primitive(item)
    return merged


def _cap(ctx: ToolContext) -> int:
    """Bytes kept per stream: half the result cap, less room for the other fields, so both
    streams and their markers fit and the executor never has to cut them again."""
    cap = getattr(ctx, "max_output_bytes", None)
    cap = cap if isinstance(cap, int) and cap > 0 else 256 * 1024
    return max(cap // 2 - 512, 64)


def _kill_marked(marker: str) -> None:
    """SIGKILL every process still carrying this call's marker in its environment: jobs that
    left the process group with ``setsid`` (Linux ``/proc`` only; a job that also cleared its
    environment stays out of reach, docs/base-package.md)."""
    sweep({CALL_MARKER_ENV: marker})


def _stop_leftovers(pgid: int, marker: str) -> None:
    """After a normal end: stop the jobs the command left behind (group, then marker)."""
    stop_group(pgid)
    _kill_marked(marker)


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(KILL_GRACE_S):
            await proc.wait()
    # Also reaches children that ignored SIGTERM after the shell itself exited.
    _signal_group(proc, signal.SIGKILL)
    await proc.wait()


class _Capture:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept: list[bytes] = []
        self.size = 0
        self.total = 0

    def text(self) -> tuple[str, bool]:
        data = b"".join(self.kept)
        truncated = self.total > self.size
        # A cut inside a multi-byte character drops it instead of ending with U+FFFD.
        text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(
            data, final=not truncated
        )
        if truncated:
            dropped = self.total - len(text.encode("utf-8"))
            # The cap may fall inside a secret: its start is masked here, before the marker
            # (the executor's masking only knows whole secrets).
            text = mask_cut(text) + f"…[truncated {dropped} bytes]"
        return text, truncated


async def _read_capped(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        capture.total += len(chunk)
        if capture.size < capture.cap:
            piece = chunk[: capture.cap - capture.size]
            capture.kept.append(piece)
            capture.size += len(piece)


async def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout_ms: float,
               cap: int, keep_background: bool = False) -> dict[str, Any]:
    """Run ``argv``; ``{durationMs, stdout, stderr, exitCode, signal, timedOut}``."""
    if not cwd.is_dir():
        raise ToolFailure(f"working directory does not exist: {cwd}", code="E_BASE_PATH_NOT_FOUND",
                          suggestion="Create the directory first or pass an existing cwd.")
    started = time.monotonic()
    marker = secrets.token_hex(8)
    env = {**env, **owner_env(), CALL_MARKER_ENV: marker}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolFailure(f"cannot start {argv[0]}: {exc.strerror or exc}", code="E_BASE_EXEC",
                          suggestion="Check that the shell exists and is executable.") from None
    captures = (_Capture(cap), _Capture(cap))
    readers = [asyncio.ensure_future(_read_capped(proc.stdout, captures[0])),
               asyncio.ensure_future(_read_capped(proc.stderr, captures[1]))]
    waiter = asyncio.ensure_future(proc.wait())
    timed_out = False
    try:
        # asyncio.wait never cancels what it waits for, so output read so far survives a
        # timeout. Open pipes count too: a background job still writing keeps the command going.
        _, pending = await asyncio.wait([waiter, *readers], timeout=timeout_ms / 1000.0)
        if pending:
            timed_out = True
            await _terminate(proc)
            _kill_marked(marker)
            await asyncio.wait(readers, timeout=DRAIN_GRACE_S)
        elif not keep_background:
            await asyncio.to_thread(_stop_leftovers, proc.pid, marker)
    except BaseException:
        # Cancelled (tool deadline, turn cancelled): never leave the process group behind.
        _signal_group(proc, signal.SIGKILL)
        _kill_marked(marker)
        # Reap it and let the pipes close, so no subprocess transport outlives the call.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([waiter, *readers], timeout=DRAIN_GRACE_S)
        for task in (waiter, *readers):
            task.cancel()
        raise
    duration_ms = round((time.monotonic() - started) * 1000)
    for reader in readers:
        reader.cancel()
    code = proc.returncode if proc.returncode is not None else -1
    signal_name: str | None = None
    if code < 0:
        try:
            signal_name = signal.Signals(-code).name
        except ValueError:
            signal_name = f"SIG{-code}"
        code = -1
    stdout, out_cut = captures[0].text()
    stderr, err_cut = captures[1].text()
    return {
        "durationMs": duration_ms,
        "stdout": stdout,
        "stderr": stderr,
        "exitCode": code,
        "signal": signal_name,
        "timedOut": timed_out,
        "truncated": out_cut or err_cut,
    }


async def exec_(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Run ``command`` with ``/bin/sh -lc``: ``{command, cwd, durationMs, stdout, …, timedOut}``."""
    command = required_text(input, "command", allow_blank=False)
    cwd_input = _optional_text(input, "cwd")
    cwd = absolute(ctx, cwd_input) if cwd_input else absolute(ctx, ".")
    result = await _run(["/bin/sh", "-lc", command], cwd, _env(ctx, input), _timeout_ms(input),
                        _cap(ctx), flag(input, "keepBackground", False))
    return {"command": command, "cwd": str(cwd), **result}


async def script(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Run ``<shell> <path> …args`` in the workdir: ``{path, shell, args, durationMs, …}``."""
    path = absolute(ctx, required_text(input, "path", allow_blank=False))
    if not path.is_file():
        raise ToolFailure(f"script not found: {path}", code="E_BASE_PATH_NOT_FOUND",
                          suggestion="Check the path (relative paths start at the workdir).")
    shell = _optional_text(input, "shell") or DEFAULT_SHELL
    raw_args = input.get("args")
    if raw_args is None:
        raw_args = []
    if not isinstance(raw_args, list) or not all(isinstance(a, str) for a in raw_args):
        raise invalid("'args' must be an array of strings")
    args = [str(a) for a in raw_args]
    timeout_ms = _timeout_ms(input)
    result = await _run([shell, str(path), *args], absolute(ctx, "."), _env(ctx, input), timeout_ms,
                        _cap(ctx), flag(input, "keepBackground", False))
    return {"path": str(path), "shell": shell, "args": args, **result}


handlers = {"exec": exec_, "script": script}
