-- The session URI a client chose (`ahp-session:/<id>`, `claude:/<id>`, …), kept verbatim so
-- the session keeps its name across restarts; NULL for sessions named by the host.
ALTER TABLE sessions ADD COLUMN resource TEXT;
-- Whether a client marked the session read.
ALTER TABLE sessions ADD COLUMN read INTEGER NOT NULL DEFAULT 0;
