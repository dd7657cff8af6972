-- claude-host's schema on PostgreSQL: the same tables as the embedded SQLite store.
-- Host metadata per Claude session.
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    resource        TEXT,
    title           TEXT,
    model           TEXT,
    effort          TEXT,
    permission_mode TEXT,
    cwd             TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    archived        BOOLEAN NOT NULL DEFAULT FALSE,
    read            BOOLEAN NOT NULL DEFAULT FALSE,
    host            TEXT
);
CREATE INDEX sessions_updated ON sessions (updated_at DESC);
-- Transcripts: one row per JSON line in append order (`id`). `json`, not `jsonb`: the line is
-- kept as Claude Code wrote it (key order, and strings holding U+0000, which jsonb refuses).
CREATE TABLE transcript_entries (
    id          BIGSERIAL PRIMARY KEY,
    project_key TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    subpath     TEXT NOT NULL DEFAULT '',
    uuid        TEXT,
    entry       JSON NOT NULL,
    stored_at   BIGINT NOT NULL
);
CREATE INDEX transcript_entries_key ON transcript_entries (project_key, session_id, subpath, id);
CREATE UNIQUE INDEX transcript_entries_uuid ON transcript_entries (project_key, session_id, subpath, uuid);
CREATE INDEX transcript_entries_session ON transcript_entries (session_id);
-- One driver per session.
CREATE TABLE session_leases (
    session_id  TEXT PRIMARY KEY NOT NULL,
    holder      TEXT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
