-- +goose NO TRANSACTION
-- +goose Up
-- Full-text search over transcripts from an expression index instead of
-- the stored tsvector column `search`. The stored column about doubles
-- every transcript row (and its WAL) for a value only the index needs; the
-- expression index holds the same lexemes, and session_search ranks the
-- few matching rows by computing their vector again.
-- Expand/contract (docs/operations.md): this release stops reading the
-- column and replaces its index; the column itself is dropped by a later
-- release, once no worker of the previous one runs. Until then those
-- workers' session_search still works, by the user_key index and a filter.
-- CONCURRENTLY: a large transcript table stays writable meanwhile.
CREATE INDEX CONCURRENTLY IF NOT EXISTS transcript_messages_content_search_idx
    ON transcript_messages USING GIN (to_tsvector('simple', content));
DROP INDEX CONCURRENTLY IF EXISTS transcript_messages_search_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS transcript_messages_search_idx ON transcript_messages USING GIN (search);
DROP INDEX CONCURRENTLY IF EXISTS transcript_messages_content_search_idx;
