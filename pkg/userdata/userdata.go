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
	type session struct{ key, origin string }
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session, error) {
		var s session
		return s, r.Scan(&s.key, &s.origin)
	})
	if err != nil {
		return Found{}, fmt.Errorf("read sessions: %w", err)
	}
	for _, id := range forms {
		f.UserKeys = append(f.UserKeys, u.Platform+":"+id)
	}
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
		f.Own = append(f.Own, s.key)
		f.UserKeys = append(f.UserKeys, "session:"+s.key)
		if ct := src.GetChatType(); (ct == "" || ct == "dm") && !slices.Contains(f.DirectChats, sessionkey.ChatKey(src)) {
			f.DirectChats = append(f.DirectChats, sessionkey.ChatKey(src))
		}
		if k := memorygate.Owner(s.key, src); !slices.Contains(f.UserKeys, k) && k != "" {
			f.UserKeys = append(f.UserKeys, k)
		}
	}
	return f, nil
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
