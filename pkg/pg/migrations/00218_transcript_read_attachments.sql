-- +goose Up
-- How a turn's first attempt read its input's attachments, kept with the
-- input's step: [{"index","bytes_ref","unavailable","mime_type",
-- "size_bytes"}], one per attachment of the message. An attempt that
-- resumes the turn from its committed steps, or republishes its answer,
-- does not read the message again: it decides from this (whether to
-- answer with speech, which pictures to show the model) as the first
-- attempt did, rather than from the attachment store, which can say
-- otherwise later (a file expired, stored by a later download, or a
-- look-up that failed). NULL for every other message, and for steps an
-- older worker wrote: those fall back to the store.
ALTER TABLE transcript_messages ADD COLUMN IF NOT EXISTS read_attachments jsonb;

-- +goose Down
ALTER TABLE transcript_messages DROP COLUMN IF EXISTS read_attachments;
