-- +goose Up
-- The event id of the last message the router started as a turn of its
-- own without queueing it (sessionstore.StartFree). The start commits with
-- it, so a redelivery of that message after the commit (the router crashed
-- before recording it as handled in Redis) is recognised as started and
-- not queued again. Adding a nullable column without a default rewrites
-- nothing.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS last_started_event_id text;

-- +goose Down
ALTER TABLE sessions DROP COLUMN IF EXISTS last_started_event_id;
