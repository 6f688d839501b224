-- +goose NO TRANSACTION
-- +goose Up
-- Delivery's housekeeping forgets the stream messages recorded before a
-- cutoff (DELETE FROM delivery_stream_messages WHERE created_at < $1, each
-- minute on every replica); without this index each run read the whole
-- table. Built without blocking the streams of a running system; an
-- interrupted build leaves an invalid index of this name, which is
-- dropped and built again.
DROP INDEX CONCURRENTLY IF EXISTS delivery_stream_messages_created;
CREATE INDEX CONCURRENTLY delivery_stream_messages_created ON delivery_stream_messages (created_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS delivery_stream_messages_created;
