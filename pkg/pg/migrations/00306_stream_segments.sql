-- +goose Up
-- A streamed reply on a platform that edits its message is cut at each
-- later model call (a turn that said "Let me check.", called a tool, then
-- answered): the text before the tool stays in its message and the text
-- after it streams into a new one (Hermes's segment break). segment is
-- the seq of the reply event that opened the segment (the restart text
-- delta; 0 for the first), the same on every replica and on a
-- redelivery, so a replica that takes the turn over writes the final
-- over the last segment's messages only. message_index stays unique in
-- the turn across segments; a row with a negative index (-segment) and
-- no platform message marks a segment opened before it had a message.
-- A constant default: no table rewrite.
ALTER TABLE delivery_stream_messages ADD COLUMN segment bigint NOT NULL DEFAULT 0;

-- +goose Down
DELETE FROM delivery_stream_messages WHERE message_index < 0;
ALTER TABLE delivery_stream_messages DROP COLUMN segment;
