-- +goose Up
-- A session key's voice reply mode, set with /voice (Hermes's
-- gateway_voice_mode.json, keyed by platform and chat): 'voice_only'
-- (/voice on: a spoken answer to a voice message), 'all' (/voice tts:
-- every answer also spoken) or 'off' (text only, the default, which ''
-- means too: Hermes's default is off). Kept per session key like
-- /footer's runtime_footer (migration 00117): it outlives /new, /resume,
-- /branch and automatic resets. The router puts it on each turn
-- (TurnRequested.voice_mode); the worker speaks the turn's final answer.
-- Expand only: rows of an earlier release keep ''.
ALTER TABLE sessions ADD COLUMN voice_mode text NOT NULL DEFAULT ''
    CHECK (voice_mode IN ('', 'off', 'voice_only', 'all'));

-- +goose Down
ALTER TABLE sessions DROP COLUMN voice_mode;
