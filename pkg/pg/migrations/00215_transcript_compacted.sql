-- +goose Up
-- A tool result the worker cleared to keep a long turn within the
-- model's context window (mid-turn compression): what the model reads in
-- its place from then on, for this turn's later calls, a re-run of the
-- turn and later turns. content keeps the tool's whole output. NULL for
-- every other message: no table rewrite.
ALTER TABLE transcript_messages ADD COLUMN IF NOT EXISTS compacted text;

-- +goose Down
ALTER TABLE transcript_messages DROP COLUMN IF EXISTS compacted;
