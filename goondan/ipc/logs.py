"""Process names and logs of every worker at either end of the wire (orchestrator, agent and
connector processes): names, log files, stdout/stderr off the pipe, JSON-line logging, and
reading the logs back.

Every process of a running swarm writes to ``<state_root>/runtime/logs/<key>/``:
``orchestrator.{stdout,stderr}.log`` and ``<agent>.<instanceKey>.{stdout,stderr}.log``. Log
records are JSON lines (docs/orchestrator.md: ``level, timestamp, agent, instanceKey, event, …``)
and pass through secret masking.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from goondan.secrets import SecretMaskingFilter, mask
from goondan.workspace.files import private_dirs

__all__ = [
    "JsonLineFormatter",
    "configure_process_logging",
    "connection_process_name",
    "follow_lines",
    "log_dir_for",
    "log_files",
    "process_name",
    "redirect_output",
    "safe_key",
    "tail_lines",
    "valid_process_name",
]

_PROCESS_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_STD_ATTRS = set(logging.LogRecord("x", 0, "x", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


def valid_process_name(name: str) -> bool:
    """Process names are ``[A-Za-z0-9._-]+`` (no path tricks)."""
    return bool(_PROCESS_NAME.match(name))


def process_name(agent_name: str, instance_key: str) -> str:
    """The log/status name of an agent process: ``<agent>.<instanceKey>`` made path-safe."""
    key = _UNSAFE.sub("-", instance_key).strip("-") or "default"
    return f"{agent_name}.{key}"[:128]


def connection_process_name(connection_name: str) -> str:
    """The log/status name of a Connection's connector process: ``connection.<name>``."""
    name = _UNSAFE.sub("-", connection_name).strip("-") or "default"
    return f"connection.{name}"[:128]


def safe_key(key: str) -> str:
    """An orchestrator key usable as a file name."""
    return log_dir_for(Path("."), key).name


def log_dir_for(state_root: Path, orchestrator_key: str) -> Path:
    """``<state_root>/runtime/logs/<key>`` (key made path-safe)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", orchestrator_key).strip("-") or "default"
    return Path(state_root) / "runtime" / "logs" / safe


def redirect_output(log_dir: Path, name: str) -> None:
    """Point fd 1/2 (and ``sys.stdout``/``sys.stderr``) at the process's append-only log files."""
    private_dirs(log_dir)
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        target = os.open(
            log_dir / f"{name}.{stream}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115


def log_files(log_dir: Path, process: str) -> dict[str, Path]:
    """``{"stdout": …, "stderr": …}`` of one process."""
    return {stream: log_dir / f"{process}.{stream}.log" for stream in ("stdout", "stderr")}


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: level, timestamp, logger, message, context, extra fields."""

    def __init__(self, **context: Any) -> None:
        super().__init__()
        self.context = {k: v for k, v in context.items() if v is not None}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "level": record.levelname.lower(),
            "timestamp": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "logger": record.name,
            **self.context,
            "message": mask(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = mask(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_process_logging(
    *, stream: IO[str] | None = None, level: str | None = None, **context: Any
) -> logging.Handler:
    """Send the ``goondan`` logger's records to ``stream`` (stderr) as masked JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLineFormatter(pid=os.getpid(), **context))
    handler.addFilter(SecretMaskingFilter())
    logger = logging.getLogger("goondan")
    name = (level or os.environ.get("GOONDAN_LOG_LEVEL") or "info").upper()
    logger.setLevel(
        {"WARN": "WARNING"}.get(name, name)
        if name in {"DEBUG", "INFO", "WARN", "WARNING", "ERROR"}
        else "INFO"
    )
    logger.addHandler(handler)
    logger.propagate = False
    return handler


def tail_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` non-empty lines of ``path`` (reads the file once, streaming)."""
    if count <= 0:
        return []
    keep: deque[str] = deque(maxlen=count)
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.strip():
                keep.append(line)
    return list(keep)


def follow_lines(
    paths: dict[str, Path], *, poll_s: float = 0.25, stop: Any = None
) -> Iterator[tuple[str, str]]:
    """Yield ``(label, line)`` for lines appended to ``paths`` from now on (``tail -f``).

    ``stop()`` returning true ends the iteration (checked every poll); files that appear later
    or get truncated are handled.
    """
    offsets = {label: (p.stat().st_size if p.exists() else 0) for label, p in paths.items()}
    partial = dict.fromkeys(paths, "")
    while not (stop is not None and stop()):
        progressed = False
        for label, path in paths.items():
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            if size < offsets[label]:
                offsets[label] = 0  # truncated / rotated
            if size == offsets[label]:
                continue
            with path.open("r", encoding="utf-8", errors="replace") as handle:
                handle.seek(offsets[label])
                chunk = handle.read()
                offsets[label] = handle.tell()
            progressed = True
            text = partial[label] + chunk
            *lines, partial[label] = text.split("\n")
            for line in lines:
                if line.strip():
                    yield label, line
        if not progressed:
            time.sleep(poll_s)
