-- +goose Up
-- The chat commands whose effect the router applied, by the inbound event
-- that asked for it (sessionstore.Once): the row is written in the
-- transaction of the effect, so a redelivery of the event (the router
-- crashed between that commit and recording the message as handled)
-- finds it, skips the effect and sends the same answer again under the
-- same ids, which delivery and JetStream take for the one already sent.
CREATE TABLE command_effects (
    -- "<platform>:<account>:<event id>", the inbound dedupe id.
    event_id    text        PRIMARY KEY,
    session_key text        NOT NULL,
    -- The command's answer, its generation and its notice's seq.
    answer      text        NOT NULL DEFAULT '',
    generation  bigint      NOT NULL DEFAULT 0,
    seq         integer     NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- Retention deletes a session's rows with it, and any row older than
-- a redelivery can come (retention.CommandEffectsAge).
CREATE INDEX command_effects_session_key ON command_effects (session_key);
CREATE INDEX command_effects_created_at ON command_effects (created_at);

-- +goose Down
DROP TABLE command_effects;
