package bus_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// The bus carries every hop as protobuf: these are the encode and decode
// costs of the two events every turn crosses (inbound and final reply),
// each with a 400-byte text as in the load benchmark.

func benchMessageReceived() *eventsv1.MessageReceived {
	now := timestamppb.New(time.Unix(1_700_000_000, 0))
	return &eventsv1.MessageReceived{
		EventId: "api:6f1c2d3e4a5b", MessageId: "chatcmpl-6f1c2d3e4a5b",
		Source: &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "sess-0123456789", ChatType: "dm",
			UserId: "api-user", UserName: "api"},
		Text: strings.Repeat("u", 400), SentAt: now, ReceivedAt: now, TransportAuthenticated: true,
		ClientSessionId: "sess-0123456789",
	}
}

func benchReply() *repliesv1.ReplyEvent {
	return &repliesv1.ReplyEvent{
		TurnId: "turn-0123456789abcdef", SessionKey: "agent:main:api:dm:sess-0123456789", Generation: 3, Seq: 7,
		Target:    &deliveryv1.Target{Platform: "api", Account: "default", ChatId: "sess-0123456789"},
		CreatedAt: timestamppb.New(time.Unix(1_700_000_000, 0)), InputMessageIds: []string{"chatcmpl-6f1c2d3e4a5b"},
		Body: &repliesv1.ReplyEvent_FinalText{FinalText: &repliesv1.FinalText{Text: "echo: " + strings.Repeat("u", 400)}},
	}
}

func benchEncode(b *testing.B, m proto.Message) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecode[T any, P interface {
	*T
	proto.Message
}](b *testing.B, m proto.Message) {
	data, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var v T
		if err := proto.Unmarshal(data, P(&v)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeMessageReceived(b *testing.B) { benchEncode(b, benchMessageReceived()) }
func BenchmarkDecodeMessageReceived(b *testing.B) {
	benchDecode[eventsv1.MessageReceived](b, benchMessageReceived())
}
func BenchmarkEncodeReplyEvent(b *testing.B) { benchEncode(b, benchReply()) }
func BenchmarkDecodeReplyEvent(b *testing.B) { benchDecode[repliesv1.ReplyEvent](b, benchReply()) }
