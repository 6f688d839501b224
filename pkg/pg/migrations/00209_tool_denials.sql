-- +goose Up
-- "/deny all" answers: the model's other calls of the same answer (one
-- step's tool calls) are denied with the same reason, without asking.
-- Kept beside the standing approvals, so that a turn resumed by another
-- worker (the first died mid-step) still denies the step's remaining
-- calls instead of asking again. One row per call the answer covers.
CREATE TABLE agent_tool_denials (
    turn_id    text        NOT NULL,
    call_id    text        NOT NULL,
    session_id text        NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, call_id)
);
CREATE INDEX agent_tool_denials_session_idx ON agent_tool_denials (session_id);

-- +goose Down
DROP TABLE agent_tool_denials;
