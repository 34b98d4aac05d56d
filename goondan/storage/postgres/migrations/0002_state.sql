-- What a JSONL state root holds, as tables (docs/storage.md "Storage contract").
-- Message and record bodies are kept as the JSON text the JSONL backend writes (one line each,
-- without its newline): TEXT, not JSONB, so a value is stored exactly as written (JSONB
-- rejects "\u0000" and reorders keys).

CREATE TABLE goondan_instances (
    id            BIGSERIAL PRIMARY KEY,
    workspace_id  TEXT NOT NULL,
    agent_name    TEXT NOT NULL,
    instance_key  TEXT NOT NULL,
    metadata      TEXT NOT NULL,             -- metadata.json: status, createdAt, updatedAt ...
    message_count INTEGER NOT NULL DEFAULT 0, -- the committed position of the conversation
    UNIQUE (workspace_id, agent_name, instance_key)
);

-- The committed conversation (base.jsonl): one row per message, in position order.
CREATE TABLE goondan_messages (
    instance_id BIGINT NOT NULL REFERENCES goondan_instances (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    message     TEXT NOT NULL,
    PRIMARY KEY (instance_id, position)
);

-- The running turn's events (events.jsonl); deleted by the commit that folds them.
CREATE TABLE goondan_events (
    instance_id BIGINT NOT NULL REFERENCES goondan_instances (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    event       TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

-- The turn journal (turn.jsonl); deleted when the turn ends.
CREATE TABLE goondan_turn_records (
    instance_id BIGINT NOT NULL REFERENCES goondan_instances (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

-- extensions/<name>.json; name is that relative file name (extension_file_name), so two
-- keys the JSONL store maps to one file are one row here too.
CREATE TABLE goondan_extension_state (
    instance_id BIGINT NOT NULL REFERENCES goondan_instances (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (instance_id, name)
);

-- approvals/<id>.json and <id>.decision.json
CREATE TABLE goondan_approvals (
    workspace_id TEXT NOT NULL,
    id           TEXT NOT NULL,
    agent_name   TEXT NOT NULL,
    instance_key TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    request      TEXT NOT NULL,
    decision     TEXT,
    PRIMARY KEY (workspace_id, id)
);

-- The durable input queues (inputs/<swarm>/inbox.jsonl, connections/.../inbox.jsonl) and
-- their claims (started/<process>.jsonl). state: pending, reserved (owner set), started.
-- A started input keeps its id (a repeated id is still refused) but not its event: the input
-- now lives in the conversation, and nothing keeps a second copy of its text.
CREATE TABLE goondan_inbox (
    seq          BIGSERIAL,
    workspace_id TEXT NOT NULL,
    scope        TEXT NOT NULL,
    id           TEXT NOT NULL,
    agent_name   TEXT NOT NULL,
    instance_key TEXT NOT NULL,
    accepted_at  TEXT NOT NULL,
    event        TEXT,
    state        TEXT NOT NULL DEFAULT 'pending',
    owner        TEXT,
    PRIMARY KEY (workspace_id, scope, id)
);
CREATE INDEX goondan_inbox_pending
    ON goondan_inbox (workspace_id, scope, agent_name, instance_key, seq)
    WHERE state <> 'started';
