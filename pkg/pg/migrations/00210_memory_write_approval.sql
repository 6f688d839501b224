-- +goose Up
-- Hermes's memory.write_approval gate, per memory owner (the user key the
-- memory tool files notes under: "<platform>:<user>" in a DM,
-- "session:<session key>" in a group). No row: the configured default
-- (memory.write_approval). /memory approval on|off writes the row.
CREATE TABLE memory_write_approval (
    user_key   text        PRIMARY KEY,
    enabled    boolean     NOT NULL,
    updated_by text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE memory_write_approval;
