-- +goose Up
-- A session key's runtime footer, set with /footer (Hermes's
-- display.runtime_footer.enabled, which its /footer writes into the
-- profile's config.yaml for every chat): 'on' or 'off' as the chat chose,
-- '' router.runtime_footer. Kept per session key like /personality and
-- /reasoning (and /busy's busy_mode, migration 00101): it outlives /new,
-- /resume, /branch and automatic resets. The router puts it on each turn
-- (TurnRequested.runtime_footer); the worker appends the footer to the
-- turn's final answer. Expand only: rows of an earlier release keep ''.
ALTER TABLE sessions ADD COLUMN runtime_footer text NOT NULL DEFAULT ''
    CHECK (runtime_footer IN ('', 'on', 'off'));

-- +goose Down
ALTER TABLE sessions DROP COLUMN runtime_footer;
