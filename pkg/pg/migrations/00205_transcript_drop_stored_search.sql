-- +goose Up
-- The contract step of 00204: drop the stored tsvector column `search`,
-- which nothing reads since the release that brought 00204 (session search
-- uses the expression index on to_tsvector('simple', content)). Every
-- transcript insert computed it and wrote it into the row and its WAL.
-- Apply only once no worker older than that release runs
-- (docs/operations.md, "Upgrading with zero downtime"). Dropping a column
-- only changes the catalog: no rewrite, a brief exclusive lock.
ALTER TABLE transcript_messages DROP COLUMN IF EXISTS search;

-- +goose Down
-- Rewrites the table to compute the column for every row.
ALTER TABLE transcript_messages
    ADD COLUMN IF NOT EXISTS search tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED;
