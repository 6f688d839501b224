package api

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// A streamed request's retry with the same Idempotency-Key — its first
// attempt's client gone midway, on another replica — gets the whole
// answer of a turn that writes it for longer than reply_timeout, which
// bounds a stream's silence, not its length: the retry shows the answer
// when it is sent, and the turn's deltas, which the retry does not show
// (it missed their start), say meanwhile that the turn goes on. The
// message is published once.
func TestKeyedStreamRetryOutlastsTheReplyTimeout(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	timeout := func(c *Config) { c.ReplyTimeout = 2 * time.Second }
	first := startService(t, b, timeout)
	second := startService(t, b, timeout)
	// 6 pieces and the final: 3.5 s, each well within reply_timeout.
	startPacedResponder(t, b, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	params := openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("write a lot")}}
	key := option.WithHeader(HeaderIdempotencyKey, "long-answer")

	// The first attempt reads the answer's first piece and leaves.
	firstCtx, leave := context.WithCancel(ctx)
	firstClient, secondClient := sdkClient(first, key), sdkClient(second, key)
	stream := firstClient.Chat.Completions.NewStreaming(firstCtx, params)
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			break
		}
	}
	leave()
	_ = stream.Close()
	if err := stream.Err(); err != nil {
		t.Fatalf("first attempt: %v", err)
	}

	stream = secondClient.Chat.Completions.NewStreaming(ctx, params)
	var text string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text += c.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err != nil || text != pacedAnswer {
		t.Fatalf("retry: %q, %v; want the whole answer", text, err)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("inbound stream holds %d events, want 1", n)
	}
}
