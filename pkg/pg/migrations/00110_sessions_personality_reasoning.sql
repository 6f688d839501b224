-- +goose Up
-- A session key's settings from /personality and /reasoning, as Hermes
-- keeps them per session key: they outlive /new, /resume and automatic
-- resets (the conversation changes, the chat's choice stays).
-- personality is a name of agent.personalities ('' none: the router
-- resolves it to its prompt for each turn); reasoning_effort is none,
-- minimal, low, medium, high or xhigh ('' agent.reasoning_effort);
-- show_reasoning shows the model's reasoning before its answer.
-- Expand only: rows of an earlier release keep the defaults.
ALTER TABLE sessions ADD COLUMN personality text NOT NULL DEFAULT '',
    ADD COLUMN reasoning_effort text NOT NULL DEFAULT '',
    ADD COLUMN show_reasoning boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE sessions DROP COLUMN show_reasoning, DROP COLUMN reasoning_effort, DROP COLUMN personality;
