-- +goose Up
-- A session key's fast mode, set with /fast (Hermes's agent.service_tier,
-- which its /fast keeps per session, or writes into the profile's
-- config.yaml with --global): 'fast' or 'normal' as the chat chose, ''
-- agent.service_tier. Kept per session key like /reasoning's effort
-- (migration 00110): it outlives /new, /resume, /branch and automatic
-- resets. The router puts it on each turn (TurnRequested.service_tier);
-- the worker sends OpenAI's service_tier "priority" or Anthropic's speed
-- "fast" on the turn's model calls. Expand only: rows of an earlier
-- release keep ''.
ALTER TABLE sessions ADD COLUMN service_tier text NOT NULL DEFAULT ''
    CHECK (service_tier IN ('', 'fast', 'normal'));

-- +goose Down
ALTER TABLE sessions DROP COLUMN service_tier;
