-- +goose Up
-- Router state: sessions (one row per session key), their history, the
-- FIFO of messages waiting for a turn, pairing, and home channels.

-- sessions holds one entry per session key. generation is the fencing
-- token: the router increments it in the transaction that starts a turn and
-- on /stop, /new and resets; workers commit transcript steps only while it
-- equals their turn's generation.
CREATE TABLE sessions (
    session_key        text PRIMARY KEY,
    session_id         text NOT NULL,
    platform           text NOT NULL,
    chat_type          text NOT NULL DEFAULT '',
    -- The full SessionSource (protojson, proto field names) for delivery.
    origin             jsonb NOT NULL DEFAULT '{}'::jsonb,
    display_name       text NOT NULL DEFAULT '',
    profile            text NOT NULL DEFAULT '',
    title              text NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    last_activity_at   timestamptz NOT NULL DEFAULT now(),
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    -- Per-session model name set with /model; never a secret.
    model_override     text NOT NULL DEFAULT '',
    -- Per-chat busy mode override: '', interrupt, queue or steer.
    busy_mode          text NOT NULL DEFAULT '',
    generation         bigint NOT NULL DEFAULT 0,
    reset_count        integer NOT NULL DEFAULT 0,
    last_reset_at      timestamptz,
    last_reset_reason  text NOT NULL DEFAULT '',
    suspended          boolean NOT NULL DEFAULT false,
    resume_pending     boolean NOT NULL DEFAULT false,
    system_prompt_fingerprint text NOT NULL DEFAULT '',
    -- The turn most recently started (diagnostics; the lock is the truth).
    last_turn_id       text NOT NULL DEFAULT '',
    last_turn_at       timestamptz
);
CREATE INDEX sessions_platform_idx ON sessions (platform, updated_at DESC);

-- session_history lists every conversation (session id) a key has had, for
-- /sessions and /resume.
CREATE TABLE session_history (
    session_key text NOT NULL,
    session_id  text NOT NULL,
    title       text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    end_reason  text NOT NULL DEFAULT '',
    PRIMARY KEY (session_key, session_id)
);
CREATE INDEX session_history_started_idx ON session_history (session_key, started_at DESC);

-- session_queue is each session's FIFO of messages waiting for a turn,
-- ordered by inbound stream sequence. own_turn rows are never merged with
-- others into one turn (API requests, /queue).
CREATE TABLE session_queue (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_key text NOT NULL,
    stream_seq  bigint NOT NULL,
    event_id    text NOT NULL,
    own_turn    boolean NOT NULL DEFAULT false,
    -- The MessageReceived, protobuf-encoded.
    event       bytea NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_key, event_id)
);
CREATE INDEX session_queue_order_idx ON session_queue (session_key, stream_seq, id);

-- pairing_codes: codes handed to unknown users, stored only as a salted
-- SHA-256 hash. Rows outlive expiry for the per-user rate limit.
CREATE TABLE pairing_codes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    platform    text NOT NULL,
    user_id     text NOT NULL,
    user_name   text NOT NULL DEFAULT '',
    salt        bytea NOT NULL,
    code_hash   bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    -- pending, approved or revoked.
    state       text NOT NULL DEFAULT 'pending'
);
CREATE INDEX pairing_codes_platform_idx ON pairing_codes (platform, state, expires_at);
CREATE INDEX pairing_codes_user_idx ON pairing_codes (platform, user_id, created_at DESC);

-- pairing_approved: users an operator approved.
CREATE TABLE pairing_approved (
    platform    text NOT NULL,
    user_id     text NOT NULL,
    user_name   text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    approved_at timestamptz NOT NULL DEFAULT now(),
    approved_by text NOT NULL DEFAULT '',
    PRIMARY KEY (platform, user_id)
);

-- pairing_lockouts: failed approvals per platform; five lock approvals.
CREATE TABLE pairing_lockouts (
    platform     text PRIMARY KEY,
    failures     integer NOT NULL DEFAULT 0,
    locked_until timestamptz
);

-- home_channels: where proactive messages of a platform go (/sethome).
CREATE TABLE home_channels (
    platform   text PRIMARY KEY,
    account    text NOT NULL DEFAULT '',
    chat_id    text NOT NULL,
    thread_id  text NOT NULL DEFAULT '',
    chat_name  text NOT NULL DEFAULT '',
    set_by     text NOT NULL DEFAULT '',
    set_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE home_channels;
DROP TABLE pairing_lockouts;
DROP TABLE pairing_approved;
DROP TABLE pairing_codes;
DROP TABLE session_queue;
DROP TABLE session_history;
DROP TABLE sessions;
