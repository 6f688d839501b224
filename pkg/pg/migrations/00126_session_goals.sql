-- +goose Up
-- A chat's standing goal (/goal, Hermes's hermes_cli/goals.py GoalState,
-- which Hermes keeps in its session database's state_meta under
-- goal:<session_id>). One row per session key, for the conversation
-- (session_id) it was set in: after /new the key's conversation is
-- another one and the goal no longer applies (/resume back to it brings
-- it back, as in Hermes). status is Hermes's: active, paused, done or
-- cleared. subgoals are /subgoal's extra criteria, in order. The
-- counters drive Hermes's auto-pause after consecutive judge failures.
--
-- sessions.goal_session_id is the conversation whose goal is active
-- ('' none), kept with the goal in the same transaction, so the router
-- learns from the session row it reads anyway when a turn starts
-- whether the turn has a goal to judge (TurnRequested.goal_active),
-- with no read more on the path of every turn.
CREATE TABLE session_goals (
    session_key        text PRIMARY KEY,
    session_id         text NOT NULL,
    goal               text NOT NULL,
    status             text NOT NULL CHECK (status IN ('active', 'paused', 'done', 'cleared')),
    turns_used         integer NOT NULL DEFAULT 0,
    max_turns          integer NOT NULL,
    subgoals           text[] NOT NULL DEFAULT '{}',
    last_verdict       text NOT NULL DEFAULT '',
    last_reason        text NOT NULL DEFAULT '',
    paused_reason      text NOT NULL DEFAULT '',
    parse_failures     integer NOT NULL DEFAULT 0,
    transport_failures integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);

ALTER TABLE sessions ADD COLUMN goal_session_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sessions DROP COLUMN goal_session_id;
DROP TABLE session_goals;
