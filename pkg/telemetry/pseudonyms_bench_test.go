package telemetry_test

import (
	"context"
	"errors"
	"io"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// BenchmarkLogRecord: two records of a turn, a session key, a user id
// and an error naming the key, with and without pseudonyms.
func BenchmarkLogRecord(b *testing.B) {
	for _, pseudonyms := range []bool{false, true} {
		name := "plain"
		if pseudonyms {
			name = "pseudonyms"
		}
		b.Run(name, func(b *testing.B) {
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: "json", Pseudonymize: pseudonyms}, io.Discard).
				With("process", "router", "platform", "telegram")
			ctx := context.Background()
			err := errors.New("lock agent:main:telegram:dm:123456789: timeout")
			b.ReportAllocs()
			for b.Loop() {
				l.InfoContext(ctx, "turn started", "session_key", "agent:main:telegram:dm:123456789", "user_id", "123456789",
					"chat_type", "dm", "event", "telegram:main:42", "turn_id", "01HXYZ")
				l.WarnContext(ctx, "turn finished", "session_key", "agent:main:telegram:dm:123456789", "err", err, "tool", "terminal")
			}
		})
	}
}

// BenchmarkLogRecordWithAProto: a record logging a proto that names a
// chat, with and without an error beside it (pseudonyms on), whose
// text is scrubbed of the proto's ids.
func BenchmarkLogRecordWithAProto(b *testing.B) {
	src := &eventsv1.SessionSource{Platform: "discord", ChatId: "900000000000000001", ChatType: "group", UserId: "15551234567"}
	for _, withErr := range []bool{false, true} {
		name := "no_error"
		if withErr {
			name = "error"
		}
		b.Run(name, func(b *testing.B) {
			l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: "json", Pseudonymize: true}, io.Discard)
			ctx := context.Background()
			args := []any{"source", src, "attempt", 2}
			if withErr {
				args = append(args, "err", errors.New("chat 900000000000000001: forbidden"))
			}
			b.ReportAllocs()
			for b.Loop() {
				l.WarnContext(ctx, "send failed", args...)
			}
		})
	}
}

// BenchmarkLogRecordManyIDs: records naming 4,000 chats (a list of
// structs, as chats makes) with errors, pseudonyms on: a record with
// one error and with two (an error and an error text), and records
// through a logger With the chats, each with an error.
func BenchmarkLogRecordManyIDs(b *testing.B) {
	const n = 4000
	ctx := context.Background()
	err := errors.New("chat C0CHAT007 of 123456789: forbidden")
	l := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: "json", Pseudonymize: true}, io.Discard)
	list := chats(n)
	b.Run("record/one_error", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.WarnContext(ctx, "send failed", "chats", list, "err", err)
		}
	})
	b.Run("record/two_errors", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.WarnContext(ctx, "send failed", "chats", list, "err", err, "last_error", "chat C0CHAT009: gone")
		}
	})
	b.Run("logger_with_the_chats", func(b *testing.B) {
		with := l.With("chats", list)
		b.ReportAllocs()
		for b.Loop() {
			with.WarnContext(ctx, "send failed", "err", err, "attempt", 2)
		}
	})
}
