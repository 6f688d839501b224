-- +goose Up
-- Telegram DM topic bindings (/topic <session-id>, as Hermes's
-- telegram_dm_topic_bindings): an earlier conversation restored into a
-- topic. session_key is the topic's key (root_key:<thread>), whose
-- sessions row then holds that conversation; a conversation is bound to
-- one topic at most. /topic off deletes the chat's bindings with its
-- topic mode. A binding whose topic has moved on (/new there) is stale:
-- the topic's sessions row is the truth, and a later restore of the
-- same conversation elsewhere replaces it.
CREATE TABLE telegram_topic_bindings (
    session_key text PRIMARY KEY,
    root_key    text NOT NULL,
    thread_id   text NOT NULL,
    session_id  text NOT NULL UNIQUE,
    user_id     text NOT NULL DEFAULT '',
    bound_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX telegram_topic_bindings_root_idx ON telegram_topic_bindings (root_key);

-- +goose Down
DROP TABLE telegram_topic_bindings;
