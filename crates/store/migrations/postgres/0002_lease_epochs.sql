-- Fencing: every take-over of a session's lease gives it a higher epoch, and every write for the
-- session names the epoch it was made under. A released lease keeps its row (expired) so the
-- next epoch still grows.
ALTER TABLE session_leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
