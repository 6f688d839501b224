package signalfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

// call makes one JSON-RPC request to f and returns its result or error.
func call(ctx context.Context, f *Fake, method string, params map[string]any) (json.RawMessage, *RPCError, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL+"/api/v1/rpc", bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, nil, err
	}
	return out.Result, out.Error, nil
}

func texts(t *testing.T, result json.RawMessage) []string {
	t.Helper()
	var got []struct {
		Envelope struct {
			DataMessage struct {
				Message string `json:"message"`
			} `json:"dataMessage"`
		} `json:"envelope"`
	}
	if err := json.Unmarshal(result, &got); err != nil {
		t.Fatalf("result %s: %v", result, err)
	}
	out := []string{}
	for _, g := range got {
		out = append(out, g.Envelope.DataMessage.Message)
	}
	return out
}

var ann = Contact{Number: "+4915112345678", UUID: "a11ce000-0000-4000-8000-000000000042", Name: "Ann"}

// The receive method as signal-cli answers it in each mode.
func TestReceive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	f := New("+15550000001")
	t.Cleanup(f.Close)
	if _, rerr, err := call(ctx, f, "receive", map[string]any{"timeout": 0.1}); err != nil || rerr == nil || rerr.Code != -1 {
		t.Fatalf("on-start daemon: error %v %v, want signal-cli's refusal (-1)", rerr, err)
	}

	f.SetReceiveMode(Manual)
	for _, m := range []string{"a", "b", "c"} {
		f.Receive(Message{From: ann, Text: m})
	}
	// Queued while nobody asked; handed out maxMessages at a time, in order.
	for _, tc := range []struct {
		params map[string]any
		want   []string
	}{
		{map[string]any{"timeout": 0}, nil}, // answers at once, reading nothing
		{map[string]any{"timeout": 0.1, "maxMessages": 2}, []string{"a", "b"}},
		{map[string]any{"timeout": 0.1, "maxMessages": 2}, []string{"c"}},
		{map[string]any{"timeout": 0.1}, nil},
	} {
		res, rerr, err := call(ctx, f, "receive", tc.params)
		if err != nil || rerr != nil {
			t.Fatalf("%v: %v %v", tc.params, rerr, err)
		}
		if got := texts(t, res); len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || (len(got) > 1 && got[1] != tc.want[1]) {
			t.Fatalf("%v: got %q, want %q", tc.params, got, tc.want)
		}
	}

	// A call waits for a message; a second one meanwhile is refused.
	answered := make(chan json.RawMessage, 1)
	go func() {
		res, _, _ := call(ctx, f, "receive", map[string]any{"timeout": 5, "maxMessages": 1})
		answered <- res
	}()
	waitFor(t, func() bool { return f.Polling() == 1 })
	if _, rerr, _ := call(ctx, f, "receive", map[string]any{"timeout": 0.1}); rerr == nil || rerr.Code != -1 {
		t.Fatalf("a second call: %v, want refused", rerr)
	}
	f.Receive(Message{From: ann, Text: "d"})
	if got := texts(t, <-answered); len(got) != 1 || got[0] != "d" {
		t.Fatalf("the waiting call got %q", got)
	}

	// A caller that goes away: the daemon finishes the call and what it
	// took is lost.
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, _, err := call(cctx, f, "receive", map[string]any{"timeout": 0.5})
		gone <- err
	}()
	waitFor(t, func() bool { return f.Polling() == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v", err)
	}
	f.Receive(Message{From: ann, Text: "e"})
	waitFor(t, func() bool { return f.Polling() == 0 })
	if lost := f.Lost(); len(lost) != 1 || f.Pending() != 0 {
		t.Fatalf("lost %d, pending %d: want the message the abandoned call took lost", len(lost), f.Pending())
	}

	// Drop breaks a call in flight without an answer.
	broken := make(chan error, 1)
	go func() {
		_, _, err := call(ctx, f, "receive", map[string]any{"timeout": 5})
		broken <- err
	}()
	waitFor(t, func() bool { return f.Polling() == 1 })
	f.Drop()
	if err := <-broken; err == nil {
		t.Fatal("a dropped call answered")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
