-- +goose Up
-- Telegram DM topic mode (/topic, as Hermes's telegram_topic_mode): a
-- row per private chat whose main view is a lobby for commands (its
-- topics are separate sessions either way). root_key is the chat's DM
-- session key without a thread (agent:main:telegram:dm:99): it carries
-- the profile and the chat, as every session key does. No row: off.
CREATE TABLE telegram_topic_modes (
    root_key   text PRIMARY KEY,
    chat_id    text NOT NULL,
    user_id    text NOT NULL DEFAULT '',
    enabled_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE telegram_topic_modes;
