-- Values the hosts of one store share (global customization decisions, per-day usage), by key.
CREATE TABLE shared_values (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
