-- +goose Up
-- Steering a running turn took waits in session_queue until the turn
-- gives it to the model (migration 00216), but to the user it is part
-- of that turn, not a message waiting for the next one. steered_by is
-- the session lock's value (the turn's grant and its worker) when the
-- turn took the message; the router records it after the turn says it
-- took the text. While the lock still holds that value the message is
-- counted as steering, not as waiting (/status, /queue, /stop, /agents);
-- once another turn holds the lock (the steered turn ended without
-- giving the text to the model) it waits as any message does. '' (rows
-- of other messages, rows queued by an earlier release): waiting.
ALTER TABLE session_queue ADD COLUMN steered_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE session_queue DROP COLUMN steered_by;
