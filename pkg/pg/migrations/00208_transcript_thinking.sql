-- +goose Up
-- An assistant tool-use step's signed thinking (Anthropic extended
-- thinking), as the model returned it: [{"text","signature"} or
-- {"redacted"}]. Anthropic wants it back, unchanged, at the start of the
-- tool-use message when the calls' results follow, so a turn resumed from
-- the transcript (another worker after a crash) reads it back with the
-- step. NULL for every other message: no table rewrite, and steps without
-- thinking store nothing more than before.
ALTER TABLE transcript_messages ADD COLUMN IF NOT EXISTS thinking jsonb;

-- +goose Down
ALTER TABLE transcript_messages DROP COLUMN IF EXISTS thinking;
