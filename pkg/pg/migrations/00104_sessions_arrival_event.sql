-- +goose Up
-- The event id of the last message whose arrival was recorded, and the
-- session's last activity before it. A handler run again for the same
-- message (its first run failed after recording the arrival) then sees
-- the activity before the message, not its own first run's, so the
-- reset policy (daily, idle) decides the same both times. A reset sets
-- the activity before the message to the reset, so a run again after a
-- reset does not reset twice. Nullable columns without a default rewrite
-- nothing.
ALTER TABLE sessions
    ADD COLUMN IF NOT EXISTS arrival_event_id text,
    ADD COLUMN IF NOT EXISTS arrival_prev_at timestamptz;

-- +goose Down
ALTER TABLE sessions
    DROP COLUMN IF EXISTS arrival_event_id,
    DROP COLUMN IF EXISTS arrival_prev_at;
