package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/delivery"
	"github.com/switchboard-chat/switchboard/services/gateway/api"
)

// TestAPIGatewayThroughDelivery runs the API gateway with the real
// delivery service; a stand-in worker answers each inbound event with
// reply events (text deltas and a final text) on the REPLIES stream, and
// the official OpenAI client gets the answer, streamed and not.
func TestAPIGatewayThroughDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: NATS, Postgres, Redis")
	}
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	db := pgtest.New(t)
	rdb, rprefix := redistest.New(t)
	log := slog.Default()

	dcfg := delivery.DefaultConfig()
	dcfg.GRPCAddr = ""
	dsvc, err := delivery.New(dcfg, delivery.Deps{Log: log, Bus: b, DB: db, Redis: rdb, RedisPrefix: rprefix})
	if err != nil {
		t.Fatal(err)
	}
	acfg := api.DefaultConfig()
	acfg.Addr, acfg.Key = "127.0.0.1:0", "sk-e2e"
	asvc, err := api.New(acfg, api.Deps{Log: log, Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- dsvc.Run(ctx) }()
	go func() { done <- asvc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	<-asvc.Listening()
	standInWorker(t, ctx, b)

	client := openai.NewClient(option.WithBaseURL("http://"+asvc.Addr()+"/v1"), option.WithAPIKey("sk-e2e"), option.WithMaxRetries(0),
		option.WithHeader(api.HeaderSession, "e2e-chat"))
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	resp, err := client.Chat.Completions.New(rctx, openai.ChatCompletionNewParams{
		Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ping")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "you said: ping" {
		t.Fatalf("completion %q", got)
	}
	stream := client.Chat.Completions.NewStreaming(rctx, openai.ChatCompletionNewParams{
		Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("pong")},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != "you said: pong" || chunks < 3 {
		t.Fatalf("streamed %q in %d chunks", got, chunks)
	}
}

// standInWorker answers inbound events with reply events, as router and
// worker would.
func standInWorker(t *testing.T, ctx context.Context, b *bus.Bus) {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			t.Errorf("decode: %v", err)
			return
		}
		src := ev.GetSource()
		key := "agent:main:api:dm:" + src.GetChatId()
		turn := "t-" + ev.GetEventId()
		target := &deliveryv1.Target{Platform: src.GetPlatform(), Account: src.GetAccount(), ChatId: src.GetChatId()}
		pieces := []string{"you ", "said: ", ev.GetText()}
		var events []*repliesv1.ReplyEvent
		for _, p := range pieces {
			events = append(events, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: &repliesv1.TextDelta{Text: p}}})
		}
		events = append(events, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_FinalText{FinalText: &repliesv1.FinalText{Text: strings.Join(pieces, "")}}})
		for i, re := range events {
			re.TurnId, re.SessionKey, re.Generation, re.Seq = turn, key, 1, int64(i+1)
			re.Target, re.InputMessageIds, re.CreatedAt = target, []string{ev.GetMessageId()}, timestamppb.Now()
			if _, err := b.Publish(ctx, b.Topology().ReplySubject(key), fmt.Sprintf("reply:%s:%d", turn, i+1), re); err != nil && ctx.Err() == nil {
				t.Errorf("publish reply: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
}
