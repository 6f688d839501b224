-- +goose Up
-- The chats /yolo turned YOLO mode on for (Hermes's session-scoped
-- approval bypass, kept in its process's memory): a row per session key
-- means the worker runs that chat's dangerous tool calls without asking,
-- until /yolo turns it off (the row is deleted). It outlives /new,
-- /branch and /resume, which keep the key.
CREATE TABLE session_yolo (
    session_key text        PRIMARY KEY,
    -- "<platform>:<user id>" of who turned it on.
    set_by      text        NOT NULL DEFAULT '',
    set_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE session_yolo;
