-- +goose Up
-- The W3C trace context a waiting message was queued under, so the turn
-- that takes it later (started by another message's turn completion)
-- continues the message's own trace instead of joining that one's.
-- Expand only: rows queued by an earlier release keep '' and their turn
-- follows whatever starts it, as before.
ALTER TABLE session_queue ADD COLUMN traceparent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE session_queue DROP COLUMN traceparent;
