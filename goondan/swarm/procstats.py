"""CPU and memory of the swarm's processes for ``goondan status`` (docs/scaling.md).

Read from ``/proc`` (Linux; elsewhere the fields are ``None``): ``cpuSeconds`` is the user plus
system CPU time the process has used since it started, ``rssBytes`` its resident set. In pooled
isolation an instance has no process of its own: its row carries its host's figures and
``sharedBy``, the number of instances on that host; ``cpuShareSeconds``/``rssShareBytes`` are
those figures divided by ``sharedBy`` — an even split, not a measurement of that instance.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from goondan.types import JsonObject

__all__ = ["pool_status", "process_stats", "with_process_stats"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_stats(pid: int | None) -> tuple[float | None, int | None]:
    """(CPU seconds, RSS bytes) of ``pid``, or ``(None, None)`` when unknown."""
    if not pid or pid <= 0:
        return None, None
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        # after the command: state is field 3; utime 14, stime 15, rss 24 (1-based, proc(5))
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS
        return round(cpu, 2), int(fields[21]) * _PAGE
    return None, None


def pool_status(spawner: Any) -> list[JsonObject]:
    """The host processes of a pooled spawner (none for other spawners)."""
    rows = getattr(spawner, "hosts_status", None)
    return list(rows()) if rows is not None else []


def with_process_stats(doc: JsonObject) -> JsonObject:
    """``doc`` (the status document) with ``cpuSeconds``/``rssBytes`` on every process row and
    host, and the host and share fields on pooled instance rows."""
    by_pid: dict[int, tuple[float | None, int | None]] = {}

    def stats(pid: Any) -> tuple[float | None, int | None]:
        if not isinstance(pid, int):
            return None, None
        if pid not in by_pid:
            by_pid[pid] = process_stats(pid)
        return by_pid[pid]

    hosts = doc.get("hosts") or []
    host_of: dict[str, JsonObject] = {}
    for host in hosts:
        host["cpuSeconds"], host["rssBytes"] = stats(host.get("pid"))
        for name in host.get("instances") or []:
            host_of[name] = host
    for row in [*(doc.get("processes") or []), *(doc.get("connections") or [])]:
        row["cpuSeconds"], row["rssBytes"] = stats(row.get("pid"))
        host = host_of.get(str(row.get("process")))
        if host is None:
            continue
        shared = max(1, len(host.get("instances") or []))
        row["host"], row["sharedBy"] = host["host"], shared
        cpu, rss = row["cpuSeconds"], row["rssBytes"]
        row["cpuShareSeconds"] = None if cpu is None else round(cpu / shared, 3)
        row["rssShareBytes"] = None if rss is None else rss // shared
    return doc
