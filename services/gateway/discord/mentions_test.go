package discord

import (
	"context"
	"fmt"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// An answer that contains @everyone, @here or a role ping notifies no one
// by them, whether it is sent or reached by the edits of a stream (Discord
// parses an edit's mentions afresh, by its defaults unless told): only
// users pinged by id are, as in Hermes. allow_mentions turns each back on.
func TestAllowedMentions(t *testing.T) {
	t.Parallel()
	const (
		role   = "800000000000000001"
		person = "700000000000000002"
	)
	pinging := fmt.Sprintf("@everyone @here see <@&%s> and <@%s>", role, person)
	for _, tc := range []struct {
		name  string
		allow AllowMentions
		want  string // MentionEveryone, MentionRoles, Mentions
	}{
		{"default", DefaultAllowMentions(), "false [] [" + person + "]"},
		{"everything allowed", AllowMentions{Everyone: true, Roles: true, Users: true, RepliedUser: true}, "true [" + role + "] [" + person + "]"},
		{"nothing allowed", AllowMentions{}, "false [] []"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b, _ := run(t, f, Config{AllowMentions: tc.allow})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
				t.Helper()
				r := &deliveryv1.SendReceipt{}
				if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
					t.Fatal(err)
				}
				if !r.GetOk() {
					t.Fatalf("%v: receipt %v", req.GetOp(), r)
				}
				return r
			}
			target := &deliveryv1.Target{Platform: "discord", ChatId: channel, ReplyToMessageId: "700000000000000001"}
			pings := func(i int) string {
				t.Helper()
				ms := f.Messages(channel)
				if len(ms) <= i {
					t.Fatalf("posted %+v", ms)
				}
				m := ms[i]
				return fmt.Sprintf("%v %v %v", m.MentionEveryone, fmt.Sprint(m.MentionRoles), fmt.Sprint(m.Mentions))
			}
			send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "sent", Text: pinging, Target: target})
			if got := pings(0); got != tc.want {
				t.Errorf("sent message notifies %s, want %s", got, tc.want)
			}
			// A stream: a harmless first part, then the edit that brings
			// the mentions.
			first := send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "streamed", Text: "Let me", Target: target})
			send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "streamed:e", Text: pinging, Target: target,
				MessageId: first.GetPlatformMessageId()})
			if got := pings(1); got != tc.want {
				t.Errorf("edited message notifies %s, want %s", got, tc.want)
			}
		})
	}
}
