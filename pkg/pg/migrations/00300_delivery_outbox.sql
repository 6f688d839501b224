-- +goose Up
-- One row per outgoing platform message (a chunk of a final answer, a
-- notice, a media message, a proactive send, the edits that replace a
-- streamed reply). Delivery replicas claim due rows with
-- FOR UPDATE SKIP LOCKED; failed and expired rows are the dead letters.
CREATE TABLE delivery_outbox (
    id                  bigserial PRIMARY KEY,
    idempotency_key     text        NOT NULL UNIQUE,
    state               text        NOT NULL DEFAULT 'queued'
                        CHECK (state IN ('queued', 'sending', 'sent', 'failed', 'expired')),
    platform            text        NOT NULL,
    account             text        NOT NULL DEFAULT '',
    chat_id             text        NOT NULL DEFAULT '',
    thread_id           text        NOT NULL DEFAULT '',
    -- Rows of one chat go out in id order: a row waits while an older row
    -- of the same chat is queued or sending.
    chat_key            text        NOT NULL,
    session_key         text        NOT NULL DEFAULT '',
    turn_id             text        NOT NULL DEFAULT '',
    -- The SendRequested to perform, protobuf-encoded.
    payload             bytea       NOT NULL,
    attempts            integer     NOT NULL DEFAULT 0,
    last_error          text        NOT NULL DEFAULT '',
    platform_message_id text        NOT NULL DEFAULT '',
    next_attempt_at     timestamptz NOT NULL,
    -- While sending: when another replica may take the row over.
    lease_until         timestamptz,
    claimed_by          text        NOT NULL DEFAULT '',
    expires_at          timestamptz NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    sent_at             timestamptz
);

CREATE INDEX delivery_outbox_due ON delivery_outbox (next_attempt_at, id)
    WHERE state IN ('queued', 'sending');
CREATE INDEX delivery_outbox_chat ON delivery_outbox (chat_key, id)
    WHERE state IN ('queued', 'sending');
CREATE INDEX delivery_outbox_dead ON delivery_outbox (updated_at DESC)
    WHERE state IN ('failed', 'expired');
CREATE INDEX delivery_outbox_turn ON delivery_outbox (turn_id) WHERE turn_id <> '';

-- Platform messages a streamed reply created by editing in place, so that
-- another replica can replace them with the final answer.
CREATE TABLE delivery_stream_messages (
    turn_id             text        NOT NULL,
    message_index       integer     NOT NULL,
    platform_message_id text        NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, message_index)
);

-- Channel directory: names the gateways have seen, for proactive sends to
-- "platform:#name".
CREATE TABLE delivery_channels (
    platform   text        NOT NULL,
    account    text        NOT NULL DEFAULT '',
    chat_id    text        NOT NULL,
    thread_id  text        NOT NULL DEFAULT '',
    name       text        NOT NULL,
    kind       text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (platform, account, chat_id, thread_id)
);
CREATE INDEX delivery_channels_name ON delivery_channels (platform, lower(name));

-- +goose Down
DROP TABLE delivery_channels;
DROP TABLE delivery_stream_messages;
DROP TABLE delivery_outbox;
