"""The spans of ``inspect trace`` in PostgreSQL (``goondan_spans``, ``migrations/0003_spans.sql``).

A span is kept as the ``inspect trace --json`` span object (``SpanRecord.to_dict()``, without
``children``) in JSON text, with the columns the readers query beside it. The writer
(:mod:`goondan.runtime.span_store`) upserts a span when it starts (``running``) and again when
it ends; :meth:`PostgresSpans.upsert` is idempotent — the same span sent twice is one row —
and never turns a finished span back to ``running`` (a late re-send of its start). Writes are
observations: unfenced, committed with ``synchronous_commit = off`` (the JSONL event log is
not fsynced either). Reads return ``(span object, start in ns since the epoch)`` pairs.

Everything goes through the backend's pool (:class:`~goondan.storage.postgres.shared.
SharedConnection`): no connection of its own.
"""

from __future__ import annotations

import json
from typing import Any

from goondan.storage.postgres.db import Connection
from goondan.storage.postgres.shared import SharedConnection
from goondan.types import JsonObject

__all__ = ["PostgresSpans", "StoredSpan"]

StoredSpan = tuple[JsonObject, int]

_UPSERT = (
    "INSERT INTO goondan_spans AS s (workspace_id, trace_id, span_id, parent_span_id, "
    "agent_name, instance_key, start_nanos, status, span) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (workspace_id, trace_id, span_id) DO UPDATE SET "
    "parent_span_id = excluded.parent_span_id, agent_name = excluded.agent_name, "
    "instance_key = excluded.instance_key, start_nanos = excluded.start_nanos, "
    "status = excluded.status, span = excluded.span, updated_at = now() "
    "WHERE s.status = 'running' OR excluded.status <> 'running'"
)
_COLUMNS = "span, start_nanos"


def _row(workspace_id: str, span: JsonObject, start_nanos: int) -> tuple[Any, ...]:
    return (workspace_id, str(span["traceId"]), str(span["spanId"]),
            span.get("parentSpanId") or None, str(span.get("agentName") or ""),
            str(span.get("instanceKey") or ""), int(start_nanos),
            str(span.get("status") or "running"),
            json.dumps(span, ensure_ascii=False, separators=(",", ":")))


def _decoded(rows: list[tuple[Any, ...]]) -> list[StoredSpan]:
    out: list[StoredSpan] = []
    for text, start in rows:
        try:
            span = json.loads(text)
        except ValueError:
            continue
        if isinstance(span, dict):
            out.append((span, int(start)))
    return out


class PostgresSpans:
    """The span table of one store (see the module docstring)."""

    def __init__(self, shared: SharedConnection) -> None:
        self._shared = shared

    def __repr__(self) -> str:
        return f"PostgresSpans({self._shared.db.where!r})"

    # Equal for one pool (a fenced backend shares its pool): the writer makes one transaction
    # of the spans of every instance of a process that writes to the same table.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, PostgresSpans) and other._shared.db is self._shared.db

    def __hash__(self) -> int:
        return id(self._shared.db)

    def upsert(self, workspace_id: str, spans: list[StoredSpan]) -> None:
        """Write ``spans`` (each with its start in ns) in one transaction, without waiting for
        the WAL flush."""
        if not spans:
            return
        rows = [_row(workspace_id, span, start) for span, start in spans]

        def work(conn: Connection) -> None:
            conn.execute("SET LOCAL synchronous_commit = off")
            with conn.cursor() as cur:
                cur.executemany(_UPSERT, rows)

        self._shared.run(work)

    def by_span_id(self, workspace_id: str, span_ids: list[str]) -> list[StoredSpan]:
        """The stored spans of ``workspace_id`` with these ids (in any trace)."""
        rows = self._shared.execute(
            f"SELECT {_COLUMNS} FROM goondan_spans WHERE workspace_id = %s "
            "AND span_id = ANY(%s)", (workspace_id, span_ids))
        return _decoded(rows.fetchall())

    def trace_ids(self, prefix: str | None, *, limit: int = 2) -> list[str]:
        """Up to ``limit`` trace ids starting with ``prefix`` (any workspace); for ``None``,
        the trace of the span that started last."""
        if prefix is None:
            rows = self._shared.execute(
                "SELECT trace_id FROM goondan_spans ORDER BY start_nanos DESC LIMIT 1", ())
        else:
            escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            rows = self._shared.execute(
                "SELECT DISTINCT trace_id FROM goondan_spans WHERE trace_id LIKE %s "
                "ORDER BY trace_id LIMIT %s", (escaped + "%", limit))
        return [str(row[0]) for row in rows.fetchall()]

    def of_traces(self, trace_ids: list[str]) -> list[StoredSpan]:
        """Every stored span of these traces."""
        if not trace_ids:
            return []
        rows = self._shared.execute(
            f"SELECT {_COLUMNS} FROM goondan_spans WHERE trace_id = ANY(%s) "
            "ORDER BY start_nanos, span_id", (trace_ids,))
        return _decoded(rows.fetchall())

    def traces_of_instance(self, workspace_id: str, agent_name: str, instance_key: str,
                           limit: int = 0) -> list[str]:
        """The traces this instance took part in, the most recent last (``limit``: the last
        so many; 0: all)."""
        rows = self._shared.execute(
            "SELECT trace_id, min(start_nanos) AS started FROM goondan_spans "
            "WHERE workspace_id = %s AND agent_name = %s AND instance_key = %s "
            "GROUP BY trace_id ORDER BY started DESC" + (" LIMIT %s" if limit else ""),
            (workspace_id, agent_name, instance_key, *((limit,) if limit else ())))
        return [str(row[0]) for row in reversed(rows.fetchall())]

    def recent_traces(self, limit: int) -> list[str]:
        """The ``limit`` traces whose first span started last, the most recent last."""
        rows = self._shared.execute(
            "SELECT trace_id, min(start_nanos) AS started FROM goondan_spans "
            "GROUP BY trace_id ORDER BY started DESC LIMIT %s", (limit,))
        return [str(row[0]) for row in reversed(rows.fetchall())]
