// Package userdata finds what Switchboard holds of one person, for the
// requests a person may make of it: to forget them (pkg/retention
// Forget) and to see it all (Export). A person is a platform and their
// user id there. Theirs are the sessions whose key is theirs alone (a
// direct chat, the session a group gives them alone, a /background task
// asked in those) and the rows filed under their user keys
// (pkg/memorygate Owner): memories, memory writes and setting, standing
// approvals, cron jobs; and their pairing, by platform and id.
package userdata

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// User names a person: a platform and their user id there, as /whoami
// shows it (on WhatsApp the number, with or without its JID suffix).
type User struct {
	Platform string
	ID       string
}

// Normalized is u with its platform in lower case and both trimmed; an
// error when either is empty.
func (u User) Normalized() (User, error) {
	u.Platform, u.ID = strings.ToLower(strings.TrimSpace(u.Platform)), strings.TrimSpace(u.ID)
	if u.Platform == "" || u.ID == "" {
		return u, errors.New("platform and user id required")
	}
	return u, nil
}

// Querier is a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Found is what Find read.
type Found struct {
	// Own are the keys of the sessions that are the user's alone, by key.
	Own []string
	// Shared are the keys of sessions others share whose last message
	// the user sent.
	Shared []string
	// UserKeys are the keys the user's own rows are filed under
	// (memorygate.Owner): <platform>:<id> in each form of the id and for
	// each direct chat's participant, session:<key> for each own session.
	UserKeys []string
	// DirectChats are the chat keys (sessionkey.ChatKey, as the outbox
	// files its rows) of the user's direct chats.
	DirectChats []string
}

// IDForms are the forms of u's id a row may hold: as given, and on
// WhatsApp its canonical number (pairing.UserID).
func IDForms(u User) []string {
	forms := []string{u.ID}
	if c := pairing.UserID(u.Platform, u.ID); c != u.ID {
		forms = append(forms, c)
	}
	return forms
}

// Find reads the sessions whose last message came from u (the Own ones,
// theirs alone: ownSession; and the Shared ones), and the user keys
// what they own is filed under.
func Find(ctx context.Context, q Querier, u User) (Found, error) {
	var f Found
	forms := IDForms(u)
	rows, err := q.Query(ctx, `SELECT session_key, origin::text FROM sessions
WHERE platform = $1 AND (origin->>'user_id' = ANY($2) OR origin->>'user_id_alt' = ANY($2)
  OR ($1 = 'whatsapp' AND (origin->>'user_id' <> '' OR origin->>'user_id_alt' <> '')))
ORDER BY session_key`, u.Platform, forms)
	if err != nil {
		return Found{}, fmt.Errorf("read sessions: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session, error) {
		var s session
		return s, r.Scan(&s.key, &s.origin)
	})
	if err != nil {
		return Found{}, fmt.Errorf("read sessions: %w", err)
	}
	f.UserKeys = ownerKeys(u, forms)
	for _, s := range list {
		src := &eventsv1.SessionSource{}
		if err := protojson.Unmarshal([]byte(s.origin), src); err != nil {
			return Found{}, fmt.Errorf("read the origin of session %s: %w", s.key, err)
		}
		if !sentBy(src, u) {
			continue // WhatsApp: another number
		}
		if !ownSession(s.key, src) {
			f.Shared = append(f.Shared, s.key)
			continue
		}
		owner := memorygate.Owner(s.key, src)
		direct := src.GetChatType() == "" || src.GetChatType() == "dm"
		if direct {
			// A direct chat may have more members than the user (a Slack
			// group DM, a Matrix room flagged direct, an API session id
			// two clients use): it is theirs only when no turn in it ran
			// for anyone else.
			others, err := othersWrote(ctx, q, s.key, append(ownerKeys(u, forms), owner))
			if err != nil {
				return Found{}, err
			}
			if others {
				f.Shared = append(f.Shared, s.key)
				continue
			}
			if chat := sessionkey.ChatKey(src); !slices.Contains(f.DirectChats, chat) {
				f.DirectChats = append(f.DirectChats, chat)
			}
		}
		f.Own = append(f.Own, s.key)
		f.UserKeys = append(f.UserKeys, "session:"+s.key)
		if owner != "" && !slices.Contains(f.UserKeys, owner) {
			f.UserKeys = append(f.UserKeys, owner)
		}
	}
	gone, err := goneSessionKeys(ctx, q, u, forms, list)
	if err != nil {
		return Found{}, err
	}
	f.UserKeys = append(f.UserKeys, gone...)
	return f, nil
}

// Filing is a table that files rows under a user key
// (memorygate.Owner): its name, its user-key column, and the condition
// its user-keyed rows meet ("" for all).
type Filing struct {
	Table, Column, Cond string
}

// Match is the condition of the rows filed under a key test accepts
// ("= ANY($1)", "LIKE $1").
func (f Filing) Match(test string) string {
	m := f.Column + " " + test
	if f.Cond != "" {
		m = f.Cond + " AND " + m
	}
	return m
}

// Filed are the tables that file a person's rows under their user keys.
// Forgetting deletes from each (pkg/retention) and Find looks in each
// for the keys of their pruned sessions; Export reads those that hold
// what the person wrote or chose with their own columns (export.go), so
// a table added here needs its place there too.
var Filed = []Filing{
	{Table: "agent_memories", Column: "user_key"},
	{Table: "memory_pending_writes", Column: "user_key"},
	{Table: "memory_write_approval", Column: "user_key"},
	{Table: "agent_tool_approvals", Column: "subject", Cond: "scope = 'user'"},
	{Table: "cron_jobs", Column: "owner"},
}

// ownedSQL lists the user keys rows are filed under that match $1 (a
// LIKE pattern), in every table of Filed.
var ownedSQL = func() string {
	parts := make([]string, 0, len(Filed))
	for _, f := range Filed {
		parts = append(parts, "SELECT "+f.Column+" AS k FROM "+f.Table+" WHERE "+f.Match("LIKE $1"))
	}
	return "SELECT k FROM (" + strings.Join(parts, " UNION ") + ") x ORDER BY k"
}()

// goneSessionKeys are the user keys session:<key> of u's own group
// sessions that no longer exist (retention pruned them) but still have
// rows filed under them: a key no session row holds (live keys were
// judged above, from their source) whose shape is a per-user key of u's
// (perUserKey).
func goneSessionKeys(ctx context.Context, q Querier, u User, forms []string, live []session) ([]string, error) {
	var out []string
	for _, id := range forms {
		pattern := "session:agent:%:" + likeEscape(u.Platform) + ":%:" + likeEscape(id)
		rows, err := q.Query(ctx, ownedSQL, pattern)
		if err != nil {
			return nil, fmt.Errorf("read user keys: %w", err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("read user keys: %w", err)
		}
		for _, k := range keys {
			key := strings.TrimPrefix(k, "session:")
			if slices.ContainsFunc(live, func(s session) bool { return s.key == key }) || slices.Contains(out, k) {
				continue
			}
			if perUserKey(key, u.Platform, id) {
				out = append(out, k)
			}
		}
	}
	return out, nil
}

// perUserKey reports whether key has the shape of a per-user session
// key of user id on platform outside a direct chat:
// agent:<profile>:<platform>:<slot>:…:<chat>[:<thread>]:<id>, the slot
// neither dm nor a /background task's. A shared thread's key whose
// thread id equals the user id would pass: no platform gives a thread
// the id of a user (Telegram's topics count up from 1, Discord's ids
// are unique snowflakes, Slack's threads are timestamps, Matrix's
// events begin with $).
func perUserKey(key, platform, id string) bool {
	rest, ok := afterNamespace(key)
	if !ok {
		return false
	}
	parts := strings.Split(rest, ":")[1:] // platform, slot, …, id
	return len(parts) >= 4 && parts[0] == platform && parts[1] != "dm" && parts[1] != sessionkey.BackgroundPlatform &&
		parts[len(parts)-1] == id
}

// likeEscape escapes s for a LIKE pattern (backslash, the default
// escape character).
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// session is a session row Find reads: its key and its origin, as JSON.
type session struct{ key, origin string }

// ownerKeys are the user keys u's direct chats file their rows under,
// one for each form of the id.
func ownerKeys(u User, forms []string) []string {
	keys := make([]string, 0, len(forms))
	for _, id := range forms {
		keys = append(keys, u.Platform+":"+id)
	}
	return keys
}

// othersWrote reports whether a turn of any conversation of the session
// key ran for someone whose user key is not one of keys: the worker
// files every transcript row under the user key of the turn's last
// sender (memorygate.Owner), so in a direct chat a row under another
// key is another member's turn.
func othersWrote(ctx context.Context, q Querier, key string, keys []string) (bool, error) {
	rows, err := q.Query(ctx, `SELECT EXISTS (SELECT 1 FROM transcript_messages
WHERE session_id = ANY(ARRAY(SELECT session_id FROM sessions WHERE session_key = $1
                             UNION SELECT session_id FROM session_history WHERE session_key = $1))
  AND session_key = $1 AND user_key <> '' AND user_key <> ALL($2))`, key, keys)
	if err != nil {
		return false, fmt.Errorf("read the transcript of %s: %w", key, err)
	}
	others, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if err != nil {
		return false, fmt.Errorf("read the transcript of %s: %w", key, err)
	}
	return others, nil
}

// sentBy reports whether src is a message of u: its user id or alternate
// id is u's, in any of the forms a platform gives it (on WhatsApp the
// number with or without its JID suffix).
func sentBy(src *eventsv1.SessionSource, u User) bool {
	want := pairing.UserID(u.Platform, u.ID)
	for _, id := range []string{src.GetUserId(), src.GetUserIdAlt()} {
		if id != "" && (id == u.ID || pairing.UserID(u.Platform, id) == want) {
			return true
		}
	}
	return false
}

// ownSession reports whether the session of key, whose last message came
// from src, belongs to src's sender alone: a direct chat, or a group's,
// channel's or thread's session whose key ends with the sender
// (group_sessions_per_user, thread_sessions_per_user), or a /background
// task asked in such a chat. It rebuilds the key from src both ways, so
// a shared session whose last message the sender wrote (a group with
// per-user sessions off, a shared thread, a forum topic) is not theirs,
// nor is a key it cannot rebuild.
func ownSession(key string, src *eventsv1.SessionSource) bool {
	rest, ok := afterNamespace(key)
	if !ok {
		return false
	}
	if chat, ok := strings.CutPrefix(rest, ":"+sessionkey.BackgroundPlatform+":"); ok {
		i := strings.LastIndexByte(chat, ':')
		if i <= 0 {
			return false
		}
		rest = ":" + chat[:i]
	}
	shared, _ := afterNamespace(sessionkey.Build(src, sessionkey.Options{}))
	if ct := src.GetChatType(); ct == "" || ct == "dm" {
		return rest == shared
	}
	perUser, _ := afterNamespace(sessionkey.Build(src, sessionkey.Options{GroupSessionsPerUser: true, ThreadSessionsPerUser: true}))
	return rest == perUser && perUser != shared
}

// afterNamespace is key after its namespace (agent:<profile>), from the
// ":" before its platform.
func afterNamespace(key string) (string, bool) {
	ns, rest, ok := strings.Cut(key, ":")
	if !ok || ns != "agent" {
		return "", false
	}
	i := strings.IndexByte(rest, ':')
	if i < 0 {
		return "", false
	}
	return rest[i:], true
}
