package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesBranchOffInTheWholeSystem runs every service, with a fake
// model that records what it is asked, and talks to it through the
// OpenAI SDK's Responses API. After A → B, a request continuing A (a
// regenerated answer) shows the model A's exchange and nothing of B's,
// in a conversation the router opened as a copy; continuing B still
// shows B; continuing the latest response copies nothing; a request
// that branches off, retried with its Idempotency-Key, is answered once
// and copies once.
func TestResponsesBranchOffInTheWholeSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	fake, d := startWithFakeModel(t)
	db, err := pgxpool.New(context.Background(), d.cfg.Postgres.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL("http://"+d.apiAddr+"/v1"), option.WithMaxRetries(0))

	ask := func(t *testing.T, text, previous string, opts ...option.RequestOption) (*responses.Response, string) {
		t.Helper()
		params := responses.ResponseNewParams{Model: "switchboard", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
		if previous != "" {
			params.PreviousResponseID = openai.String(previous)
		}
		var hdr *http.Response
		resp, err := client.Responses.New(ctx, params, append(opts, option.WithResponseInto(&hdr))...)
		if err != nil {
			t.Fatalf("%s: %v\nlog:\n%s", text, err, d.logs.String())
		}
		if want := "echo: " + text; resp.OutputText() != want {
			t.Fatalf("%s: answer %q, want %q", text, resp.OutputText(), want)
		}
		return resp, hdr.Header.Get("X-Session-Id")
	}
	// seen is what the model was shown with the message text: the
	// conversation before it, user and assistant messages.
	seen := func(t *testing.T, text string) []string {
		t.Helper()
		var found []string
		n := 0
		for _, req := range fake.Requests() {
			if req.LastUserText() != text {
				continue
			}
			n++
			found = nil
			for _, m := range req.Messages {
				if (m.Role == "user" || m.Role == "assistant") && m.Content != text {
					found = append(found, m.Role+": "+m.Content)
				}
			}
		}
		if n == 0 {
			t.Fatalf("the model was never asked %q", text)
		}
		return found
	}
	countSQL := func(t *testing.T, query string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sessions := func(t *testing.T) int { return countSQL(t, `SELECT count(*) FROM sessions WHERE platform = 'api'`) }
	exchange := func(text string) []string { return []string{"user: " + text, "assistant: echo: " + text} }

	a, conv := ask(t, "alpha", "")
	b, h := ask(t, "bravo", a.ID)
	if h != conv {
		t.Fatalf("B ran in %q, want A's conversation %q", h, conv)
	}
	before := sessions(t)

	// Regenerated from A: A's exchange, not B's, in a new conversation.
	c, h := ask(t, "charlie", a.ID)
	if h != c.ID {
		t.Fatalf("C ran in %q, want a conversation named after it", h)
	}
	if got, want := seen(t, "charlie"), exchange("alpha"); !slices.Equal(got, want) {
		t.Fatalf("the model saw %q with C, want %q", got, want)
	}
	if n := sessions(t); n != before+1 {
		t.Fatalf("%d api sessions after the branch, want %d", n, before+1)
	}
	// B's chain is intact, and continuing the latest response copies
	// nothing.
	before = sessions(t)
	if _, h := ask(t, "delta", b.ID); h != conv {
		t.Fatalf("D ran in %q, want %q", h, conv)
	}
	if got, want := seen(t, "delta"), append(exchange("alpha"), exchange("bravo")...); !slices.Equal(got, want) {
		t.Fatalf("the model saw %q with D, want %q", got, want)
	}
	// The branch goes on as any conversation: its own turns follow A's.
	if _, h := ask(t, "echo", c.ID); h != c.ID {
		t.Fatalf("E ran in %q, want %q", h, c.ID)
	}
	if got, want := seen(t, "echo"), append(exchange("alpha"), exchange("charlie")...); !slices.Equal(got, want) {
		t.Fatalf("the model saw %q with E, want %q", got, want)
	}
	if n := sessions(t); n != before {
		t.Fatalf("%d api sessions after continuing the latest responses, want %d (no copy)", n, before)
	}
	copies := `SELECT count(*) FROM transcript_messages WHERE position('@' in turn_id) > 0`
	if n := countSQL(t, copies); n != 2 {
		t.Fatalf("%d copied messages, want A's exchange once (2)", n)
	}

	// A branch retried with its Idempotency-Key: one answer, one copy.
	keyed := option.WithHeader("Idempotency-Key", "regenerate-a")
	f1, h1 := ask(t, "foxtrot", a.ID, keyed)
	f2, h2 := ask(t, "foxtrot", a.ID, keyed)
	if f1.ID != f2.ID || h1 != f1.ID || h2 != f1.ID {
		t.Fatalf("retried branch: %s in %q, then %s in %q", f1.ID, h1, f2.ID, h2)
	}
	if n := countSQL(t, copies); n != 4 {
		t.Fatalf("%d copied messages after the retried branch, want 4 (A's exchange once more)", n)
	}
	if n := countSQL(t, `SELECT count(*) FROM worker_turns w JOIN sessions s ON s.session_key = w.session_key
		WHERE s.session_key LIKE '%' || $1`, ":"+f1.ID); n != 1 {
		t.Fatalf("%d turns in the retried branch, want 1", n)
	}
	if got, want := seen(t, "foxtrot"), exchange("alpha"); !slices.Equal(got, want) {
		t.Fatalf("the model saw %q with F, want %q", got, want)
	}
	if strings.Contains(d.logs.String(), "level=ERROR") {
		t.Logf("log:\n%s", d.logs.String())
	}
}
