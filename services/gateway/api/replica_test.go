package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// TestReplyReachesTheReplicaHoldingTheRequest: a send served by another
// API replica (the queue group picks any) is forwarded to the replica
// whose request waits for it.
func TestReplyReachesTheReplicaHoldingTheRequest(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	holder := startService(t, b, nil)
	other := startService(t, b, nil)

	type result struct {
		code int
		text string
	}
	res := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+holder.Addr()+"/v1/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			res <- result{}
			return
		}
		defer resp.Body.Close()
		var c completion
		_ = json.NewDecoder(resp.Body).Decode(&c)
		text := ""
		if len(c.Choices) > 0 {
			text = c.Choices[0].Message.Content
		}
		res <- result{resp.StatusCode, text}
	}()
	var id string
	platformtest.WaitFor(t, "the request to wait", func() bool {
		holder.waiting.mu.Lock()
		defer holder.waiting.mu.Unlock()
		for k := range holder.waiting.m {
			id = k
		}
		return id != ""
	})
	ctx := context.Background()
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: &deliveryv1.Target{Platform: PlatformName, ChatId: id},
		Text: "from the other replica", Final: true, InputMessageIds: []string{id}}
	if _, err := other.Send(ctx, req); err != nil {
		t.Fatalf("send on the other replica: %v", err)
	}
	if r := <-res; r.code != 200 || r.text != "from the other replica" {
		t.Fatalf("response %d %q", r.code, r.text)
	}
	// A reply for a replica that is gone is accepted and dropped.
	req.InputMessageIds = []string{"req_deadbeef_0123"}
	if _, err := other.Send(ctx, req); err != nil {
		t.Fatalf("send for a gone replica: %v", err)
	}
}
