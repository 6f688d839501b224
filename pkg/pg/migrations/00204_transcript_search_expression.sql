-- +goose NO TRANSACTION
-- +goose Up
-- Full-text search over transcripts from an expression index instead of a
-- stored tsvector column. The stored column about doubled every
-- transcript row (and its WAL) for a value only the index needs; the
-- expression index holds the same lexemes, and session_search ranks the
-- few matching rows by computing their vector again.
-- Workers of the previous release query the column: until they are
-- replaced, their session_search tool answers with an error (the turn
-- goes on).
-- CONCURRENTLY: a large transcript table stays writable meanwhile.
CREATE INDEX CONCURRENTLY IF NOT EXISTS transcript_messages_content_search_idx
    ON transcript_messages USING GIN (to_tsvector('simple', content));
ALTER TABLE transcript_messages DROP COLUMN IF EXISTS search;

-- +goose Down
ALTER TABLE transcript_messages ADD COLUMN IF NOT EXISTS search tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED;
CREATE INDEX CONCURRENTLY IF NOT EXISTS transcript_messages_search_idx ON transcript_messages USING GIN (search);
DROP INDEX CONCURRENTLY IF EXISTS transcript_messages_content_search_idx;
