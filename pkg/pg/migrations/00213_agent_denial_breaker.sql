-- +goose Up
-- The smart-approval judge's consecutive DENY verdicts per conversation
-- (Hermes's _denial_tally; approvals.denial_breaker_threshold): a turn
-- can move to another worker, and a conversation's turns run on any
-- worker, so the tally is kept here, beside the "/deny all" answers
-- (agent_tool_denials), rather than in one worker's memory. A row exists
-- only while the tally is above zero: an approval deletes it. turn_id
-- and call_id are the call whose DENY was counted last, so that the
-- judge asked again about that call by a worker that resumes the turn
-- does not count it twice. Deleted with the conversation's session, and
-- on their own a day after the last denial (pkg/retention, by
-- updated_at), as Hermes's in-memory tally is bounded.
CREATE TABLE agent_denial_breaker (
    session_id text        PRIMARY KEY,
    denials    integer     NOT NULL CHECK (denials > 0),
    turn_id    text        NOT NULL,
    call_id    text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_denial_breaker_updated_idx ON agent_denial_breaker (updated_at);

-- +goose Down
DROP TABLE agent_denial_breaker;
