-- A session's customization decisions (JSON), kept with its record so they move with it.
ALTER TABLE sessions ADD COLUMN decisions TEXT;
