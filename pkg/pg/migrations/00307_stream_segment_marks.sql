-- +goose Up
-- The mark of a stream segment opened before its first message (00306)
-- was a row of delivery_stream_messages with a negative index and no
-- platform message. Replicas from before 00306 read every row of a turn
-- there as a message to write over: during a rolling upgrade, one that
-- took such a turn over edited the message "" with the answer's first
-- part (refused, the answer lost) and deleted the messages after it (the
-- text before the tool call). The marks get a table of their own, which
-- those replicas do not read (they write the final over all the turn's
-- messages from the first, as before segments).
CREATE TABLE delivery_stream_segments (
    turn_id    text        NOT NULL,
    segment    bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, segment)
);
CREATE INDEX delivery_stream_segments_created ON delivery_stream_segments (created_at);
INSERT INTO delivery_stream_segments (turn_id, segment, created_at)
SELECT turn_id, segment, created_at FROM delivery_stream_messages WHERE message_index < 0
ON CONFLICT DO NOTHING;
DELETE FROM delivery_stream_messages WHERE message_index < 0;

-- +goose Down
INSERT INTO delivery_stream_messages (turn_id, message_index, platform_message_id, segment, created_at)
SELECT turn_id, -segment, '', segment, created_at FROM delivery_stream_segments
ON CONFLICT DO NOTHING;
DROP TABLE delivery_stream_segments;
