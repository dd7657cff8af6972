-- Host-side metadata for a Claude session. The transcript stays where the CLI writes it;
-- this is the overlay a host adds (title, chosen model and mode, archive flag).
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    title           TEXT,
    model           TEXT,
    effort          TEXT,
    permission_mode TEXT,
    cwd             TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    archived        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_updated ON sessions (updated_at DESC);
