-- Which host last ran a session (shown in listings).
ALTER TABLE sessions ADD COLUMN host TEXT;
-- Transcripts as Claude Code writes them: one row per JSON line, in append order. `subpath`
-- is '' for the main transcript, `subagents/agent-<id>` for a subagent's. An entry's `uuid`
-- (when it has one) is its idempotency key under its transcript.
CREATE TABLE transcript_entries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    project_key TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    subpath     TEXT NOT NULL DEFAULT '',
    uuid        TEXT,
    entry       TEXT NOT NULL,
    stored_at   INTEGER NOT NULL
);
CREATE INDEX transcript_entries_key ON transcript_entries (project_key, session_id, subpath, id);
CREATE UNIQUE INDEX transcript_entries_uuid ON transcript_entries (project_key, session_id, subpath, uuid);
CREATE INDEX transcript_entries_session ON transcript_entries (session_id);
-- One driver per session: who holds it, until when (Unix milliseconds).
CREATE TABLE session_leases (
    session_id  TEXT PRIMARY KEY NOT NULL,
    holder      TEXT NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
