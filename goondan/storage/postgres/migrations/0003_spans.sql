-- The spans of `goondan inspect trace` (docs/observability.md "Span tree"), written by the
-- processes that run instances on this store, so a trace split across machines is one tree.
-- span is the `inspect trace --json` span object (SpanRecord.to_dict(), without children) as
-- JSON text; the other columns are what the readers query. No message text is kept here: the
-- span objects hold ids, names, durations, usage and error codes (a tool call's or agent
-- request's error message, the text of a tool result, is left out by the writer).
CREATE TABLE goondan_spans (
    workspace_id   TEXT NOT NULL,
    trace_id       TEXT NOT NULL,
    span_id        TEXT NOT NULL,
    parent_span_id TEXT,
    agent_name     TEXT NOT NULL,
    instance_key   TEXT NOT NULL,
    start_nanos    BIGINT NOT NULL,   -- start, nanoseconds since the epoch (tree order)
    status         TEXT NOT NULL,     -- running | ok | error
    span           TEXT NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, trace_id, span_id)
);
-- inspect trace PREFIX (across workspaces, as a trace id is)
CREATE INDEX goondan_spans_trace ON goondan_spans (trace_id text_pattern_ops);
-- inspect trace --last
CREATE INDEX goondan_spans_start ON goondan_spans (start_nanos);
-- inspect instance KEY --traces
CREATE INDEX goondan_spans_instance
    ON goondan_spans (workspace_id, agent_name, instance_key, start_nanos);
-- a wait for approval closed by another process than the one that opened it
CREATE INDEX goondan_spans_span ON goondan_spans (workspace_id, span_id);
