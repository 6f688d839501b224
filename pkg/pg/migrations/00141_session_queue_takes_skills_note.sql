-- +goose Up
-- Whether the turn of a waiting message takes the session's one-shot
-- /reload-skills note (00135). Hermes prepends its pending note to the
-- message of the next agent run; /undo and /compress run no agent with
-- a user message (Hermes answers them in the gateway), so the note
-- waits past them for the next message that does. The router's queue
-- holds the events encoded, which SQL cannot read, so the enqueue
-- records it (sessionstore.TakesSkillsNote). Expand only: rows queued
-- by an earlier release take the note, as they did.
ALTER TABLE session_queue ADD COLUMN takes_skills_note boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE session_queue DROP COLUMN takes_skills_note;
