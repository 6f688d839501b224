-- +goose Up
-- The W3C trace context of the reply a row was made from, so the send,
-- which runs later from the row, continues the message's trace.
ALTER TABLE delivery_outbox ADD COLUMN traceparent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE delivery_outbox DROP COLUMN traceparent;
