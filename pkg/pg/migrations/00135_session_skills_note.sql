-- +goose Up
-- Hermes's one-shot /reload-skills note (gateway/run.py
-- _pending_skills_reload_notes): when a reload added or removed skills,
-- the note is prepended to the session's next user message, once, then
-- cleared; a session boundary (/new, /resume, /branch …) drops it.
-- Hermes keeps it in its process's memory; here it waits on the session
-- row, for the conversation (session_id) it was made in, and the
-- transaction that takes the next turn's messages off the queue takes
-- it (sessionstore's dequeue): it rides exactly one published turn,
-- whichever router replica starts it.
ALTER TABLE sessions ADD COLUMN skills_note text;
ALTER TABLE sessions ADD COLUMN skills_note_session text;

-- +goose Down
ALTER TABLE sessions DROP COLUMN skills_note_session;
ALTER TABLE sessions DROP COLUMN skills_note;
