-- +goose Up
-- With /reasoning show, a model call that only reasoned before its tool
-- calls leaves its block in a stream message, and the progress message
-- (or approval prompt) of its tools goes below it; the answer must then
-- go below them, not on in the block's message. A delivery replica that
-- took the turn over and posted that tools' message records here that
-- it is below the first `messages` messages of the turn's stream segment
-- `segment` (the seq that opened it, as in delivery_stream_segments), so
-- a replica that takes the turn over from it, which knows neither that
-- message nor the block, still opens a segment for the answer below
-- them. Replicas from before this table do not read it.
CREATE TABLE delivery_stream_tools (
    turn_id    text        NOT NULL,
    segment    bigint      NOT NULL,
    messages   integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, segment, messages)
);
CREATE INDEX delivery_stream_tools_created ON delivery_stream_tools (created_at);

-- +goose Down
DROP TABLE delivery_stream_tools;
