-- +goose Up
-- The tool progress mode /verbose chose for a platform (Hermes's
-- display.platforms.<platform>.tool_progress, which its /verbose writes
-- into the profile's config.yaml): one row per profile and platform, read
-- by the router when a turn starts (while router.tool_progress_command is
-- on) and carried on the turn to the worker and delivery.
CREATE TABLE tool_progress_modes (
    -- The router's profile ('' for the default one), as sessions.profile.
    profile    text        NOT NULL,
    platform   text        NOT NULL,
    mode       text        NOT NULL CHECK (mode IN ('off', 'new', 'all', 'verbose')),
    -- "<platform>:<user id>" of who chose it.
    set_by     text        NOT NULL DEFAULT '',
    set_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (profile, platform)
);

-- +goose Down
DROP TABLE tool_progress_modes;
