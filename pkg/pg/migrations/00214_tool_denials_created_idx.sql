-- +goose NO TRANSACTION
-- +goose Up
-- The session retention (pkg/retention) deletes "/deny all" answers
-- (agent_tool_denials) once created_at is older than
-- retention.ToolDenialsAge, with or without a retention, a batch at a
-- time (DELETE ... WHERE (turn_id, call_id) IN (SELECT ... WHERE
-- created_at < $1 LIMIT $2)); this index finds them without reading the
-- table. Built without blocking the "/deny all" of a running system; an
-- interrupted build leaves an invalid index of this name, which is
-- dropped and built again.
DROP INDEX CONCURRENTLY IF EXISTS agent_tool_denials_created_idx;
CREATE INDEX CONCURRENTLY agent_tool_denials_created_idx ON agent_tool_denials (created_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS agent_tool_denials_created_idx;
