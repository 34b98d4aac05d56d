-- The store's own bookkeeping (docs/storage.md): a few named facts, and leases with fencing.
-- goondan_schema_migrations (applied versions) is created by migrate.py itself, before this.

-- Key/value facts about the store: storeId (a random id, minted once, so a copy or a status
-- line can tell two stores apart).
CREATE TABLE goondan_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO goondan_meta (key, value) VALUES ('storeId', gen_random_uuid()::text);

-- Fencing tokens: one sequence for every lease, so a token is never reused, by any lease.
CREATE SEQUENCE goondan_lease_tokens AS BIGINT;

-- One row per lease name (e.g. the orchestrator of one swarm). A lease is held while
-- expires_at is in the future by the DATABASE's clock; a token is valid exactly as long.
-- A released or expired row stays (owner and token of the last holder) until the next acquire.
CREATE TABLE goondan_leases (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    token       BIGINT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    renewed_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
