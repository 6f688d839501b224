-- +goose Up
-- Standing approvals of dangerous tool calls: "/approve session" covers a
-- pattern (a tool, or send_message to one target) for the rest of the
-- conversation (scope session, subject its session id), "/approve always"
-- for the user from then on (scope user, subject the user key).
CREATE TABLE agent_tool_approvals (
    scope      text        NOT NULL CHECK (scope IN ('session', 'user')),
    subject    text        NOT NULL,
    pattern    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, subject, pattern)
);

-- +goose Down
DROP TABLE agent_tool_approvals;
