package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// source is a LogValuer, as a caller might log a chat.
type source struct{ platform, user string }

func (s source) LogValue() slog.Value {
	return slog.GroupValue(slog.String("platform", s.platform), slog.String("user_id", s.user))
}

// keyValuer resolves to a session key.
type keyValuer string

func (k keyValuer) LogValue() slog.Value { return slog.StringValue(string(k)) }

func TestLogPseudonyms(t *testing.T) {
	t.Parallel()
	const (
		key  = "agent:main:telegram:dm:123456789"
		user = "123456789"
	)
	p := pseudonym.New("secret")
	pkey := "agent:main:telegram:dm:" + p.ID(user)
	tests := []struct {
		name string
		log  func(*slog.Logger)
		// path to the attribute in the JSON record, and its value.
		path []string
		want any
	}{
		{"session_key", func(l *slog.Logger) { l.Info("m", "session_key", key) }, []string{"session_key"}, pkey},
		{"task_session_key", func(l *slog.Logger) {
			l.Info("m", "task_session_key", "agent:main:background:telegram:dm:123456789:bg_1")
		},
			[]string{"task_session_key"}, "agent:main:background:telegram:dm:" + p.ID(user) + ":" + p.ID("bg_1")},
		{"from_session_key", func(l *slog.Logger) { l.Info("m", "from_session_key", key) }, []string{"from_session_key"}, pkey},
		{"first_key", func(l *slog.Logger) { l.Info("m", "first_key", key) }, []string{"first_key"}, pkey},
		{"last_key", func(l *slog.Logger) { l.Info("m", "last_key", key) }, []string{"last_key"}, pkey},
		{"user_id", func(l *slog.Logger) { l.Info("m", "user_id", user) }, []string{"user_id"}, p.ID(user)},
		{"user_id as a number", func(l *slog.Logger) { l.Info("m", "user_id", int64(123456789)) }, []string{"user_id"}, p.ID(user)},
		{"thread_id", func(l *slog.Logger) { l.Info("m", "thread_id", user) }, []string{"thread_id"}, p.ID(user)},
		{"user_id_alt", func(l *slog.Logger) { l.Info("m", "user_id_alt", user) }, []string{"user_id_alt"}, p.ID(user)},
		{"chat_id", func(l *slog.Logger) { l.Info("m", "chat_id", "15551234567@s.whatsapp.net") }, []string{"chat_id"}, p.ID("15551234567@s.whatsapp.net")},
		{"by a user", func(l *slog.Logger) { l.Info("m", "by", "telegram:"+user) }, []string{"by"}, "telegram:" + p.ID(user)},
		{"by an operator", func(l *slog.Logger) { l.Info("m", "by", "admin:alice") }, []string{"by"}, "admin:alice"},
		{"owner", func(l *slog.Logger) { l.Info("m", "owner", "session:"+key) }, []string{"owner"}, "session:" + pkey},
		{"subject", func(l *slog.Logger) { l.Info("m", "subject", "telegram:"+user) }, []string{"subject"}, "telegram:" + p.ID(user)},
		{"a NATS subject", func(l *slog.Logger) { l.Info("m", "subject", "replies.3") }, []string{"subject"}, "replies.3"},
		{"target", func(l *slog.Logger) { l.Info("m", "target", key) }, []string{"target"}, pkey},
		{"key with no personal part", func(l *slog.Logger) { l.Info("m", "session_key", "agent:main:telegram:dm") }, []string{"session_key"}, "agent:main:telegram:dm"},
		{"empty key", func(l *slog.Logger) { l.Info("m", "session_key", "") }, []string{"session_key"}, ""},
		{"other attributes", func(l *slog.Logger) { l.Info("m", "platform", "telegram", "turn_id", "t1") }, []string{"turn_id"}, "t1"},
		{"error naming a key", func(l *slog.Logger) { l.Info("m", "err", fmt.Errorf("claim lock %s: %w", key, errTimeout)) },
			[]string{"err"}, "claim lock " + pkey + ": timeout"},
		{"string naming a key", func(l *slog.Logger) { l.Info("m", "reason", "busy with "+key) }, []string{"reason"}, "busy with " + pkey},
		{"message naming a key", func(l *slog.Logger) { l.Info("turn for " + key + " done") }, []string{"msg"}, "turn for " + pkey + " done"},
		{"slog.Group", func(l *slog.Logger) { l.Info("m", slog.Group("src", "platform", "telegram", "user_id", user)) },
			[]string{"src", "user_id"}, p.ID(user)},
		{"nested groups", func(l *slog.Logger) {
			l.Info("m", slog.Group("a", slog.Group("b", "session_key", key)))
		}, []string{"a", "b", "session_key"}, pkey},
		{"WithGroup", func(l *slog.Logger) { l.WithGroup("turn").Info("m", "session_key", key) }, []string{"turn", "session_key"}, pkey},
		{"With", func(l *slog.Logger) { l.With("session_key", key).Info("m") }, []string{"session_key"}, pkey},
		{"WithGroup then With", func(l *slog.Logger) { l.WithGroup("g").With("user_id", user).Info("m") }, []string{"g", "user_id"}, p.ID(user)},
		{"LogValuer group", func(l *slog.Logger) { l.Info("m", "source", source{"telegram", user}) }, []string{"source", "user_id"}, p.ID(user)},
		{"LogValuer value", func(l *slog.Logger) { l.Info("m", "session_key", keyValuer(key)) }, []string{"session_key"}, pkey},
		{"slog.Attr", func(l *slog.Logger) { l.LogAttrs(t.Context(), slog.LevelInfo, "m", slog.String("chat_id", user)) }, []string{"chat_id"}, p.ID(user)},
		// A platform's error text naming the chat the caller knows.
		{"error naming ids", func(l *slog.Logger) {
			l.Info("m", "err", pseudonym.Naming(fmt.Errorf(`Post "https://discord.com/api/v9/channels/%s/messages": EOF`, user), user))
		}, []string{"err"}, `Post "https://discord.com/api/v9/channels/` + p.ID(user) + `/messages": EOF`},
		{"error wrapping one naming ids", func(l *slog.Logger) {
			l.Info("m", "err", fmt.Errorf("send to %s: %w", key, pseudonym.Naming(fmt.Errorf("chat %s not found", user), user)))
		}, []string{"err"}, "send to " + pkey + ": chat " + p.ID(user) + " not found"},
		// An error logged beside the id it is about.
		{"error beside its chat_id", func(l *slog.Logger) {
			l.Warn("m", "chat_id", user, "err", fmt.Errorf("failed to POST /_matrix/client/v3/join/%s (HTTP 403)", user))
		}, []string{"err"}, "failed to POST /_matrix/client/v3/join/" + p.ID(user) + " (HTTP 403)"},
		{"error beside a user_id as a number", func(l *slog.Logger) {
			l.Warn("m", "err", fmt.Errorf("user %s not found", user), "user_id", int64(123456789))
		}, []string{"err"}, "user " + p.ID(user) + " not found"},
		{"error under a logger With its chat_id", func(l *slog.Logger) {
			l.With("chat_id", user).WithGroup("g").Warn("m", "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"g", "err"}, "chat " + p.ID(user) + ": forbidden"},
		{"a short thread_id is not taken from a status", func(l *slog.Logger) {
			l.Warn("m", "chat_id", user, "thread_id", "502", "err", fmt.Errorf("chat %s: HTTP 502: Bad Gateway", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": HTTP 502: Bad Gateway"},
		{"error text beside its chat_id", func(l *slog.Logger) {
			l.Warn("m", "chat_id", user, "last_error", "The 'To' number +"+user+" is not valid")
		}, []string{"last_error"}, "The 'To' number +" + p.ID(user) + " is not valid"},
		{"error beside a chat_id in a group", func(l *slog.Logger) {
			l.Warn("m", slog.Group("chat", "chat_id", user), "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error in a group beside its chat_id", func(l *slog.Logger) {
			l.Warn("m", "chat_id", user, slog.Group("send", "err", fmt.Errorf("chat %s: forbidden", user)))
		}, []string{"send", "err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error text and chat_id in nested groups", func(l *slog.Logger) {
			l.Warn("m", slog.Group("a", slog.Group("b", "chat_id", user), slog.Group("c", "last_error", "chat "+user+" gone")))
		}, []string{"a", "c", "last_error"}, "chat " + p.ID(user) + " gone"},
		{"error under a logger With a group naming its user", func(l *slog.Logger) {
			l.With(slog.Group("src", "user_id", user)).Warn("m", "err", fmt.Errorf("user %s blocked the bot", user))
		}, []string{"err"}, "user " + p.ID(user) + " blocked the bot"},
		{"error beside a LogValuer group naming its user", func(l *slog.Logger) {
			l.Warn("m", "source", source{"telegram", user}, "err", fmt.Errorf("user %s blocked the bot", user))
		}, []string{"err"}, "user " + p.ID(user) + " blocked the bot"},
		// More ids than the four a record names most often: a chat, a
		// thread, a user and their alt id, and a group for another chat.
		{"error beside six ids", func(l *slog.Logger) {
			l.Warn("m", "chat_id", "C0CHAT001", "thread_id", "T0THREAD1", "user_id", "U0USER001", "user_id_alt", "U0ALT0001",
				slog.Group("to", "chat_id", "C0CHAT002", "user_id", user),
				"err", fmt.Errorf("move C0CHAT001/T0THREAD1 of U0USER001 (U0ALT0001) to C0CHAT002 for %s: forbidden", user))
		}, []string{"err"}, "move " + p.ID("C0CHAT001") + "/" + p.ID("T0THREAD1") + " of " + p.ID("U0USER001") +
			" (" + p.ID("U0ALT0001") + ") to " + p.ID("C0CHAT002") + " for " + p.ID(user) + ": forbidden"},
		{"error under a logger With a group of six ids", func(l *slog.Logger) {
			l.With(slog.Group("g", "chat_id", "C0CHAT001", "thread_id", "T0THREAD1", "user_id", "U0USER001",
				"user_id_alt", "U0ALT0001", "chat_id", "C0CHAT002", "user_id", user)).
				Warn("m", "err", fmt.Errorf("C0CHAT002 for %s: forbidden", user))
		}, []string{"err"}, p.ID("C0CHAT002") + " for " + p.ID(user) + ": forbidden"},
		// A record naming a list of chats, more than the few a record
		// names most often: its error is scrubbed of them all, and
		// one naming none of them is logged as it is.
		{"error beside twenty chats", func(l *slog.Logger) {
			l.Warn("m", "chats", chats(20), "err", fmt.Errorf("chat C0CHAT007 of %s: forbidden", user), "user_id", user)
		}, []string{"err"}, "chat " + p.ID("C0CHAT007") + " of " + p.ID(user) + ": forbidden"},
		{"error naming none of twenty chats", func(l *slog.Logger) {
			l.Warn("m", "chats", chats(20), "err", errors.New("rate limited: retry after 30s"))
		}, []string{"err"}, "rate limited: retry after 30s"},
		{"error under a logger With twenty chats", func(l *slog.Logger) {
			l.With("chats", chats(20)).Warn("m", "err", fmt.Errorf("chat C0CHAT019: forbidden"), "chat_id", "C0CHAT020")
		}, []string{"err"}, "chat " + p.ID("C0CHAT019") + ": forbidden"},
		// Past maxRecordIDs the error's text is withheld, not logged
		// naming the ids past the bound.
		{"error beside too many ids", func(l *slog.Logger) {
			l.Warn("m", "err", fmt.Errorf("chat %s: forbidden", user), "chats", chats(4096), "user_id", user)
		}, []string{"err"}, "(error text withheld: the record names more than 4096 ids)"},
		// An error a logger holds from a With is about the ids its
		// records name as much as one of their own.
		{"error With'd before the record's chat_id", func(l *slog.Logger) {
			l.With("err", fmt.Errorf("chat %s: forbidden", user)).Warn("m", "chat_id", user)
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error With'd beside its chat_id", func(l *slog.Logger) {
			l.With("chat_id", user, "err", fmt.Errorf("chat %s: forbidden", user)).Warn("m")
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error With'd before a With of its user", func(l *slog.Logger) {
			l.With("last_error", "user "+user+" blocked the bot").With("user_id", user).Warn("m")
		}, []string{"last_error"}, "user " + p.ID(user) + " blocked the bot"},
		{"error With'd in a group, then a group and the record's chat_id", func(l *slog.Logger) {
			l.WithGroup("a").With("err", fmt.Errorf("chat %s: forbidden", user)).WithGroup("b").With("n", 1).
				Warn("m", "chat_id", user)
		}, []string{"a", "err"}, "chat " + p.ID(user) + ": forbidden"},
		{"the record's ids in the groups after a With'd error", func(l *slog.Logger) {
			l.WithGroup("a").With("err", errTimeout).WithGroup("b").With("n", 1).Warn("m", "chat_id", user)
		}, []string{"a", "b", "chat_id"}, p.ID(user)},
		{"a value marked personal", func(l *slog.Logger) { l.Info("m", "message_id", pseudonym.Personal("+"+user+":1700000000000")) },
			[]string{"message_id"}, p.ID("+" + user + ":1700000000000")},
		{"chat_ids", func(l *slog.Logger) { l.Info("m", "chat_ids", []string{"C0CHANNEL", user}) },
			[]string{"chat_ids"}, []any{p.ID("C0CHANNEL"), p.ID(user)}},
		{"user_ids", func(l *slog.Logger) { l.Info("m", "user_ids", []string{user}) }, []string{"user_ids"}, []any{p.ID(user)}},
		{"user_ids as numbers", func(l *slog.Logger) { l.Info("m", "user_ids", []int64{123456789, 987654321}) },
			[]string{"user_ids"}, []any{p.ID(user), p.ID("987654321")}},
		{"chat_ids as ints", func(l *slog.Logger) { l.Info("m", "chat_ids", []int{123456789, -100123456789}) },
			[]string{"chat_ids"}, []any{p.ID(user), p.ID("-100123456789")}},
		{"chat_ids in a group", func(l *slog.Logger) { l.Info("m", slog.Group("cfg", "chat_ids", []int64{123456789})) },
			[]string{"cfg", "chat_ids"}, []any{p.ID(user)}},
		{"user_ids as numbers in a struct", func(l *slog.Logger) {
			l.Info("m", "allowed", struct {
				UserIDs []int64 `json:"user_ids"`
			}{[]int64{123456789}})
		}, []string{"allowed", "user_ids"}, []any{p.ID(user)}},
		{"chat_ids as any values", func(l *slog.Logger) { l.Info("m", "chat_ids", []any{"C0CHANNEL", int64(123456789)}) },
			[]string{"chat_ids"}, []any{p.ID("C0CHANNEL"), p.ID(user)}},
		{"chat_ids as Stringers", func(l *slog.Logger) { l.Info("m", "chat_ids", []chatRef{{"C0CHANNEL"}, {user}}) },
			[]string{"chat_ids"}, []any{p.ID("room C0CHANNEL"), p.ID("room " + user)}},
		// A list of ids is about the record's errors as much as an id
		// attribute is; a list under a name that is no id list's is
		// no list of ids, logged as it is, and so is the error.
		{"error beside its chat_ids", func(l *slog.Logger) {
			l.Warn("m", "chat_ids", []string{"C0CHANNEL", user}, "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error before user_ids as numbers", func(l *slog.Logger) {
			l.Warn("m", "err", fmt.Errorf("user %s blocked the bot", user), "user_ids", []int64{987654321, 123456789})
		}, []string{"err"}, "user " + p.ID(user) + " blocked the bot"},
		{"error text beside chat_ids as any values", func(l *slog.Logger) {
			l.Warn("m", "last_error", "chat "+user+" gone", "chat_ids", []any{int64(123456789)})
		}, []string{"last_error"}, "chat " + p.ID(user) + " gone"},
		{"error beside chat_ids as Stringers", func(l *slog.Logger) {
			l.Warn("m", "chat_ids", []chatRef{{user}}, "err", fmt.Errorf("room %s: forbidden", user))
		}, []string{"err"}, p.ID("room "+user) + ": forbidden"},
		{"chat_ids as any values beside an error and a struct", func(l *slog.Logger) {
			l.Warn("m", "chat_ids", []any{user}, "err", errTimeout, "target", struct {
				Platform string `json:"platform"`
			}{"slack"})
		}, []string{"chat_ids"}, []any{p.ID(user)}},
		{"error beside chat_ids in a group", func(l *slog.Logger) {
			l.Warn("m", slog.Group("cfg", "chat_ids", []string{user}), "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error under a logger With chat_ids", func(l *slog.Logger) {
			l.With("chat_ids", []string{user}).Warn("m", "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error With'd before a record's user_ids", func(l *slog.Logger) {
			l.With("err", fmt.Errorf("user %s blocked the bot", user)).Warn("m", "user_ids", []string{user})
		}, []string{"err"}, "user " + p.ID(user) + " blocked the bot"},
		{"error beside a map naming user_ids", func(l *slog.Logger) {
			l.Warn("m", "allow", map[string]any{"user_ids": []string{user}, "profiles": []string{"main"}},
				"err", fmt.Errorf("user %s: not allowed", user))
		}, []string{"err"}, "user " + p.ID(user) + ": not allowed"},
		{"error beside a struct naming chat_ids as numbers", func(l *slog.Logger) {
			l.Warn("m", "cfg", struct {
				ChatIDs []int64 `json:"chat_ids"`
			}{[]int64{123456789}}, "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error beside a list under another name", func(l *slog.Logger) {
			l.Warn("m", "recipients", []string{user}, "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + user + ": forbidden"},
		{"chat_key", func(l *slog.Logger) { l.Info("m", "chat_key", "whatsapp:main:"+user) }, []string{"chat_key"}, "whatsapp:main:" + p.ID(user)},
		{"msg_id naming its sender", func(l *slog.Logger) { l.Info("m", "msg_id", "signal:main:+"+user+":1700000000000") },
			[]string{"msg_id"}, "signal:main:" + p.ID("+"+user+":1700000000000")},
		{"event naming its sender", func(l *slog.Logger) { l.Info("m", "event", "signal:main:+"+user+":1700000000000") },
			[]string{"event"}, "signal:main:" + p.ID("+"+user+":1700000000000")},
		{"a notice's turn_id", func(l *slog.Logger) { l.Info("m", "turn_id", "notice:signal:main:+"+user+":17:1") },
			[]string{"turn_id"}, "notice:signal:main:" + p.ID("+"+user+":17:1")},
		{"a notice's delivery key", func(l *slog.Logger) { l.Info("m", "key", "notice:signal:main:+"+user+":17:1:0") },
			[]string{"key"}, "notice:signal:main:" + p.ID("+"+user+":17:1:0")},
		{"a delivery key naming a session", func(l *slog.Logger) { l.Info("m", "key", "event:"+key+":3") },
			[]string{"key"}, "event:" + p.Key(key+":3")},
		{"opaque msg_id", func(l *slog.Logger) { l.Info("m", "msg_id", "telegram:main:42") }, []string{"msg_id"}, "telegram:main:42"},
		{"a proto", func(l *slog.Logger) {
			l.Info("m", "source", &eventsv1.SessionSource{Platform: "telegram", ChatId: user, ChatType: "dm", UserId: user})
		}, []string{"source", "chat_id"}, p.ID(user)},
		{"a struct", func(l *slog.Logger) {
			l.Info("m", "target", struct {
				Platform string `json:"platform"`
				ChatID   string `json:"chat_id"`
				Attempts int    `json:"attempts"`
			}{"slack", user, 3})
		}, []string{"target", "chat_id"}, p.ID(user)},
		{"a map", func(l *slog.Logger) { l.Info("m", "ids", map[string]any{"user_id": user, "n": 2}) }, []string{"ids", "user_id"}, p.ID(user)},
		// Ids inside values logged with slog.Any (found by the names
		// their JSON has, a proto's by its fields' names) are about
		// the record's errors as much as an id attribute is.
		{"error beside a proto naming its chat", func(l *slog.Logger) {
			l.Warn("m", "source", &eventsv1.SessionSource{Platform: "discord", ChatId: user}, "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error before a proto naming its user within another", func(l *slog.Logger) {
			l.Warn("m", "err", fmt.Errorf("user %s blocked the bot", user),
				"event", &eventsv1.MessageReceived{EventId: "42", Source: &eventsv1.SessionSource{Platform: "telegram", UserId: user}})
		}, []string{"err"}, "user " + p.ID(user) + " blocked the bot"},
		{"error text beside a struct naming its user as a number", func(l *slog.Logger) {
			l.Warn("m", "last_error", "user "+user+" blocked the bot", "target", struct {
				UserID int64 `json:"user_id"`
			}{123456789})
		}, []string{"last_error"}, "user " + p.ID(user) + " blocked the bot"},
		{"error beside a map in a group", func(l *slog.Logger) {
			l.Warn("m", slog.Group("g", "ids", map[string]any{"thread_id": user}), "err", fmt.Errorf("thread %s gone", user))
		}, []string{"err"}, "thread " + p.ID(user) + " gone"},
		{"error beside a slice of protos", func(l *slog.Logger) {
			l.Warn("m", "sources", []*eventsv1.SessionSource{{Platform: "slack", ChatId: "C0CHANNEL"}, {Platform: "slack", ChatId: user}},
				"err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"a slice of structs", func(l *slog.Logger) {
			l.Info("m", "targets", []struct {
				ChatID string `json:"chat_id"`
			}{{user}})
		}, []string{"targets"}, []any{map[string]any{"chat_id": p.ID(user)}}},
		{"error under a logger With a proto naming its chat", func(l *slog.Logger) {
			l.With("source", &eventsv1.SessionSource{Platform: "discord", ChatId: user}).Warn("m", "err", fmt.Errorf("chat %s: forbidden", user))
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
		{"error With'd before a record's struct naming its chat", func(l *slog.Logger) {
			l.With("err", fmt.Errorf("chat %s: forbidden", user)).Warn("m", "target", struct {
				ChatID string `json:"chat_id"`
			}{user})
		}, []string{"err"}, "chat " + p.ID(user) + ": forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "secret"}, &buf)
			tt.log(log)
			rec := decodeRecord(t, buf.Bytes())
			if got := lookup(t, rec, tt.path); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s = %v, want %v (record %s)", strings.Join(tt.path, "."), got, tt.want, buf.String())
			}
			if want := fmt.Sprint(tt.want); want != "" && strings.Contains(buf.String(), user) && !strings.Contains(want, user) {
				t.Errorf("record still names %s: %s", user, buf.String())
			}
		})
	}
}

// chatRef is a chat as a caller might hold it, a fmt.Stringer: logged
// as an id, it is its String.
type chatRef struct{ id string }

func (c chatRef) String() string { return "room " + c.id }

// chats is a list of n chats, as a caller might log the chats a
// message goes to: C0CHAT000, C0CHAT001, …
func chats(n int) []struct {
	ChatID string `json:"chat_id"`
} {
	out := make([]struct {
		ChatID string `json:"chat_id"`
	}, n)
	for i := range out {
		out[i].ChatID = fmt.Sprintf("C0CHAT%03d", i)
	}
	return out
}

func TestLogPseudonymsOff(t *testing.T) {
	t.Parallel()
	const key = "agent:main:telegram:dm:123456789"
	var buf bytes.Buffer
	log := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Pseudonymize: false, PseudonymKey: "secret"}, &buf)
	log.Info("turn for "+key, "session_key", key, "user_id", "123456789", "by", "telegram:123456789",
		"err", fmt.Errorf("claim lock %s: %w", key, errTimeout), "message_id", pseudonym.Personal("+123456789:17"),
		"reason", pseudonym.Naming(errors.New("chat 123456789 not found"), "123456789"))
	rec := decodeRecord(t, buf.Bytes())
	for k, want := range map[string]string{
		"msg": "turn for " + key, "session_key": key, "user_id": "123456789", "by": "telegram:123456789",
		"err": "claim lock " + key + ": timeout", "message_id": "+123456789:17", "reason": "chat 123456789 not found",
	} {
		if got := rec[k]; got != want {
			t.Errorf("%s = %v, want %q as logged", k, got, want)
		}
	}
}

// TestLogPseudonymsStable: two processes with the same key (replicas,
// or one process before and after a restart) give an id one pseudonym;
// another key gives another.
func TestLogPseudonymsStable(t *testing.T) {
	t.Parallel()
	logged := func(cfg telemetry.LogConfig) any {
		var buf bytes.Buffer
		telemetry.NewLogger(cfg, &buf).Info("m", "user_id", "123456789")
		return decodeRecord(t, buf.Bytes())["user_id"]
	}
	a := logged(telemetry.LogConfig{Pseudonymize: true, PseudonymKey: "k1"})
	if b := logged(telemetry.LogConfig{Pseudonymize: true, PseudonymKey: "k1", Format: "json"}); a != b {
		t.Errorf("same key, two pseudonyms: %v and %v", a, b)
	}
	if c := logged(telemetry.LogConfig{Pseudonymize: true, PseudonymKey: "k2"}); a == c {
		t.Errorf("two keys, one pseudonym: %v", a)
	}
	unkeyed := logged(telemetry.LogConfig{Pseudonymize: true})
	if again := logged(telemetry.LogConfig{Pseudonymize: true}); unkeyed != again || unkeyed == "123456789" {
		t.Errorf("unkeyed pseudonyms %v and %v, want one pseudonym", unkeyed, again)
	}
}

var errTimeout = fmt.Errorf("timeout")

func decodeRecord(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return rec
}

func lookup(t *testing.T, rec map[string]any, path []string) any {
	t.Helper()
	var v any = rec
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %s in %v", strings.Join(path, "."), rec)
		}
		v = m[k]
	}
	return v
}

// TestPseudonymsCostNothingWithoutIDs: a record that names nobody costs
// no allocation more with pseudonyms than without. The level, which a
// handler with a ReplaceAttr encodes as any value (encoding/json or
// MarshalText), goes as the string it writes without one.
func TestPseudonymsCostNothingWithoutIDs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	ctx := context.Background()
	for _, format := range []string{"json", "text"} {
		var out bytes.Buffer
		for _, pseudonymize := range []bool{false, true} {
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "debug", Format: format, Pseudonymize: pseudonymize}, &out)
			l.WarnContext(ctx, "m", "platform", "telegram")
		}
		if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 ||
			cutTime(lines[0]) != cutTime(lines[1]) {
			t.Errorf("%s: with pseudonyms the record is written differently:\n%s", format, out.String())
		}
		l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: true}, io.Discard)
		if n := testing.AllocsPerRun(100, func() {
			l.InfoContext(ctx, "turn finished", "platform", "telegram", "turn_id", "01HX", "steps", 3)
		}); n != 0 {
			t.Errorf("%s: a record that names nobody allocates %v times with pseudonyms, want 0 (as without)", format, n)
		}
		// Nor does one through a logger With'd an error: its handler
		// is built again only for a record that names someone.
		withErr := l.With("err", errTimeout, "chat_id", "123456789")
		if n := testing.AllocsPerRun(100, func() {
			withErr.InfoContext(ctx, "turn finished", "platform", "telegram", "turn_id", "01HX", "steps", 3)
		}); n != 0 {
			t.Errorf("%s: a record that names nobody allocates %v times through a logger With an error, want 0", format, n)
		}
	}
}

// TestStructsNamingNobodyLoggedAsTheyAre: a struct, a map or a proto
// that names no one is written as without pseudonyms: its fields in
// their order (JSON), as its String or %+v (text), not as the map
// decoded to look for ids in it.
func TestStructsNamingNobodyLoggedAsTheyAre(t *testing.T) {
	t.Parallel()
	type limits struct {
		Platform string `json:"platform"`
		Attempts int    `json:"attempts"`
		Backoff  string `json:"backoff"`
	}
	u := &url.URL{Scheme: "https", Host: "api.telegram.org", Path: "/bot/sendMessage"}
	for _, format := range []string{"json", "text"} {
		var out bytes.Buffer
		for _, pseudonymize := range []bool{false, true} {
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: pseudonymize}, &out)
			l.Info("m", "limits", limits{"telegram", 3, "1s"}, "url", u, "counts", map[string]int{"sent": 2, "failed": 1},
				"source", &eventsv1.SessionSource{Platform: "telegram", ChatType: "group"})
		}
		if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || cutTime(lines[0]) != cutTime(lines[1]) {
			t.Errorf("%s: with pseudonyms the record is written differently:\n%s", format, out.String())
		}
	}
}

// cutTime drops a record's time, the part two records never share.
func cutTime(line string) string {
	if i := strings.Index(line, "level"); i >= 0 {
		return line[i:]
	}
	return line
}

// chatPanics is a value whose MarshalJSON panics, as a method that
// does not guard against a nil field does.
type chatPanics struct {
	ChatID string `json:"chat_id"`
	n      *int
}

func (c chatPanics) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Itoa(*c.n)), nil
}

// chatFails is a value whose MarshalJSON fails.
type chatFails struct {
	ChatID string `json:"chat_id"`
}

func (chatFails) MarshalJSON() ([]byte, error) { return nil, errors.New("not now") }

// TestValuesThatFailToEncodeLoggedAsWithoutPseudonyms: a value whose
// MarshalJSON panics or fails, alone or in a list, beside an error or
// in a logger's With, is written as it is without pseudonyms (the JSON
// handler's "!PANIC: …" or "!ERROR:…", the text handler's %+v): the
// log call does not panic though the pseudonymizer encodes the value
// to look for ids in it.
func TestValuesThatFailToEncodeLoggedAsWithoutPseudonyms(t *testing.T) {
	t.Parallel()
	values := map[string]any{
		"panics": chatPanics{ChatID: "-100123456789"}, "list that panics": []chatPanics{{ChatID: "-100123456789"}},
		"fails": chatFails{ChatID: "-100123456789"}, "list that fails": []chatFails{{ChatID: "-100123456789"}},
	}
	logs := map[string]func(l *slog.Logger, v any){
		"record":                 func(l *slog.Logger, v any) { l.Info("m", "v", v) },
		"record with an error":   func(l *slog.Logger, v any) { l.Warn("m", "v", v, "err", errors.New("forbidden")) },
		"With":                   func(l *slog.Logger, v any) { l.With("v", v).Warn("m", "err", errors.New("forbidden")) },
		"With'd error, a record": func(l *slog.Logger, v any) { l.With("err", errors.New("forbidden")).Warn("m", "v", v) },
	}
	for vname, v := range values {
		for lname, log := range logs {
			for _, format := range []string{"json", "text"} {
				t.Run(vname+"/"+lname+"/"+format, func(t *testing.T) {
					var out bytes.Buffer
					for _, pseudonymize := range []bool{false, true} {
						log(telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: pseudonymize}, &out), v)
					}
					if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || cutTime(lines[0]) != cutTime(lines[1]) {
						t.Errorf("with pseudonyms the record is written differently:\n%s", out.String())
					}
				})
			}
		}
	}
}

// countingChat is a chat whose encodings are counted.
type countingChat struct {
	id string
	n  *atomic.Int32
}

func (c countingChat) MarshalJSON() ([]byte, error) {
	c.n.Add(1)
	return json.Marshal(map[string]string{"platform": "slack", "chat_id": c.id})
}

// TestStructBesideAnErrorEncodedOnce: a struct logged beside an error is
// encoded once, to find the ids in it that the error is scrubbed of, and
// logged from what that encoding decoded to, with its ids as pseudonyms;
// one naming no one is logged as it is.
func TestStructBesideAnErrorEncodedOnce(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("secret")
	for _, format := range []string{"json", "text"} {
		for _, chat := range []string{"C0CHANNEL", ""} {
			var n atomic.Int32
			var buf bytes.Buffer
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: true, PseudonymKey: "secret"}, &buf)
			l.Warn("send failed", "target", countingChat{chat, &n}, "err", fmt.Errorf("channel %s: not_in_channel", chat))
			want := 1
			if chat == "" && format == "json" {
				want = 2 // scanned, then logged as it is by the handler
			}
			if got := int(n.Load()); got != want {
				t.Errorf("%s, chat %q: the struct was encoded %d times, want %d: %s", format, chat, got, want, buf.String())
			}
			if chat != "" && (strings.Contains(buf.String(), chat) || strings.Count(buf.String(), p.ID(chat)) != 2) {
				t.Errorf("%s: want the struct and the error naming %s as %s: %s", format, chat, p.ID(chat), buf.String())
			}
		}
	}
}

// joiningChat is a LogValuer of a chat as its caller keeps it, which a
// chat id joins after its calls' first `after` (another goroutine
// setting it, under the lock LogValue takes).
type joiningChat struct {
	mu    *sync.Mutex
	calls *int
	after int
}

func (c joiningChat) LogValue() slog.Value {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.calls++
	v := struct {
		Platform string `json:"platform"`
		ChatID   string `json:"chat_id,omitempty"`
	}{Platform: "slack"}
	if *c.calls > c.after {
		v.ChatID = "C0CHANNEL"
	}
	return slog.AnyValue(v)
}

// TestValueChangedAfterTheScanNotLoggedRaw: a LogValuer beside an error
// whose value names a chat only from some call on is never logged with
// the chat's id as it is, whichever call that is: the record's scan
// decodes one of its values to find ids in, and the value logged is the
// one it decoded, not a later one that the tree of the scan's says
// nothing of.
func TestValueChangedAfterTheScanNotLoggedRaw(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		for after := range 6 {
			var buf bytes.Buffer
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: true, PseudonymKey: "secret"}, &buf)
			var mu sync.Mutex
			calls := 0
			l.Warn("send failed", "target", joiningChat{&mu, &calls, after}, "err", errors.New("not_in_channel"))
			if strings.Contains(buf.String(), "C0CHANNEL") {
				t.Errorf("%s, the chat known from LogValue's call %d on: logged as it is: %s", format, after+1, buf.String())
			}
		}
	}
}

// TestValueUnderLevelPseudonymized: a record's own attribute named
// "level" (not the record's level) is pseudonymized as one of any other
// name: a struct beside an error is logged as its tree, not as the
// handler's wrapper of it (encodedValue), and never with its chat id as
// it is.
func TestValueUnderLevelPseudonymized(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("secret")
	chat := struct {
		ChatID string `json:"chat_id"`
	}{"C0CHANNEL"}
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: true, PseudonymKey: "secret"}, &buf)
		l.Warn("m", "level", chat, "err", errors.New("not_in_channel"))
		l.Info("m", "level", chat)
		out := buf.String()
		if strings.Contains(out, "C0CHANNEL") || strings.Contains(out, "tree") || strings.Count(out, p.ID("C0CHANNEL")) != 2 {
			t.Errorf("%s: want the chat under level as %s twice: %s", format, p.ID("C0CHANNEL"), out)
		}
		if strings.Count(out, "WARN") != 1 || strings.Count(out, "INFO") != 1 {
			t.Errorf("%s: want the records' own levels kept: %s", format, out)
		}
	}
}

// formattedError is an error that writes itself in more detail with %+v
// (as errors with a stack trace do) and as JSON.
type formattedError struct{}

func (formattedError) Error() string { return "short" }
func (formattedError) Format(s fmt.State, _ rune) {
	_, _ = io.WriteString(s, "short, with detail")
}
func (formattedError) MarshalJSON() ([]byte, error) { return []byte(`{"code":7}`), nil }

// TestErrorBesideAStructNamingNoOneAsItIs: an error in a record that
// names no id, beside a struct that names none either, is logged as the
// handler writes it without pseudonyms (its own %+v, its MarshalJSON),
// not as the text of an error marked as naming no ids.
func TestErrorBesideAStructNamingNoOneAsItIs(t *testing.T) {
	t.Parallel()
	target := struct {
		Platform string `json:"platform"`
	}{"slack"}
	for _, format := range []string{"json", "text"} {
		var out bytes.Buffer
		for _, pseudonymize := range []bool{false, true} {
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: format, Pseudonymize: pseudonymize}, &out)
			l.Warn("m", "target", target, "err", formattedError{})
		}
		if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || cutTime(lines[0]) != cutTime(lines[1]) {
			t.Errorf("%s: with pseudonyms the record is written differently:\n%s", format, out.String())
		}
	}
}

// TestManyIDsScrubbedByOneAutomaton: the forms of thousands of ids, and
// the automaton that finds them (pseudonym.Scrubber), are made once for
// a record, whatever the number of its errors, and once for a logger
// With them, whatever the number of its records. Counted in bytes
// allocated: making them for 4,000 ids costs about 2 MB, so a second
// error costs a record far less than that, as does a record with an
// error through such a logger (its ids' list, 64 KB, copied).
func TestManyIDsScrubbedByOneAutomaton(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	const (
		n     = 4000
		bound = 1 << 20 // bytes
	)
	p := pseudonym.New("")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("C0CHAT%04d", i)
	}
	var buf bytes.Buffer
	l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Pseudonymize: true}, &buf)
	err := errors.New("chat C0CHAT0007: forbidden")
	ctx := context.Background()
	// allocated is the bytes a record costs, on average over a few.
	allocated := func(log func()) uint64 {
		buf.Reset()
		log()
		if !strings.Contains(buf.String(), "chat "+p.ID("C0CHAT0007")+": forbidden") {
			t.Fatalf("the error is not scrubbed: %s", buf.String())
		}
		const runs = 5
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			buf.Reset()
			log()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / runs
	}
	one := allocated(func() { l.WarnContext(ctx, "m", "chat_ids", ids, "err", err) })
	two := allocated(func() { l.WarnContext(ctx, "m", "chat_ids", ids, "err", err, "last_error", "chat C0CHAT0009: gone") })
	if two > one+bound {
		t.Errorf("a second error costs a record naming %d ids %d bytes (%d, %d), want less than %d", n, two-one, two, one, bound)
	}
	with := l.With("chat_ids", ids)
	if got := allocated(func() { with.WarnContext(ctx, "m", "err", err) }); got > bound {
		t.Errorf("a record with an error through a logger With %d ids costs %d bytes, want less than %d", n, got, bound)
	}
}

// lines is an io.Writer of log lines safe for goroutines at once.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, string(b))
	return len(b), nil
}

// TestLoggerWithManyIDsSharedByGoroutines: a logger With many ids (its
// Scrubber, made once) logged through by goroutines at once writes
// each record as a logger of its own would: its errors scrubbed of
// the logger's ids and of the record's own.
func TestLoggerWithManyIDsSharedByGoroutines(t *testing.T) {
	t.Parallel()
	const n, goroutines, records = 100, 8, 40
	p := pseudonym.New("k")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("C0CHAT%04d", i)
	}
	logs := []func(l *slog.Logger, g, i int){
		func(l *slog.Logger, g, i int) {
			l.Warn("m", "err", fmt.Errorf("chat %s: forbidden", ids[(g*records+i)%n]))
		},
		func(l *slog.Logger, g, i int) {
			own := fmt.Sprintf("D0OWN%02d%03d", g, i)
			l.Warn("m", "chat_id", own, "err", fmt.Errorf("chat %s, not %s: forbidden", own, ids[i%n]))
		},
		func(l *slog.Logger, g, i int) {
			l.With("user_id", fmt.Sprintf("U0USER%02d%03d", g, i)).Warn("m", "last_error", fmt.Sprintf("user U0USER%02d%03d in %s", g, i, ids[(i+g)%n]))
		},
	}
	cfg := telemetry.LogConfig{Level: "info", Format: "json", Pseudonymize: true, PseudonymKey: "k"}
	var shared lines
	with := telemetry.NewLogger(cfg, &shared).With("chat_ids", ids)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range records {
				logs[i%len(logs)](with, g, i)
			}
		}()
	}
	wg.Wait()
	var want []string
	for g := range goroutines {
		for i := range records {
			var own lines
			logs[i%len(logs)](telemetry.NewLogger(cfg, &own).With("chat_ids", ids), g, i)
			want = append(want, cutTime(own.all[0]))
		}
	}
	got := make([]string, len(shared.all))
	for i, l := range shared.all {
		got[i] = cutTime(l)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("records through a shared logger differ from those of a logger each:\n%s\nwant\n%s", strings.Join(got, ""), strings.Join(want, ""))
	}
	if !strings.Contains(strings.Join(got, ""), "chat "+p.ID(ids[0])+": forbidden") {
		t.Errorf("errors not scrubbed of the logger's ids: %s", got[0])
	}
}
