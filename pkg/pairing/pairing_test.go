package pairing

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestNewCode(t *testing.T) {
	for range 1000 {
		c := NewCode()
		if len(c) != CodeLength {
			t.Fatalf("code %q has length %d", c, len(c))
		}
		for _, r := range c {
			if !strings.ContainsRune(Alphabet, r) {
				t.Fatalf("code %q has %q outside the alphabet", c, r)
			}
		}
	}
	if Normalize(" abcd-efgh ") != "ABCDEFGH" {
		t.Fatal("Normalize")
	}
}

func TestRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type step struct {
		do      string // issue, approve, wrong, advance, approved, revoke
		user    string
		d       time.Duration
		wantErr error
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"issue then approve", []step{{do: "issue", user: "u1"}, {do: "approve", user: "u1"}, {do: "approved", user: "u1"}}},
		{"one code per user per 10 minutes", []step{
			{do: "issue", user: "u1"}, {do: "issue", user: "u1", wantErr: ErrRateLimited},
			{do: "advance", d: 9 * time.Minute}, {do: "issue", user: "u1", wantErr: ErrRateLimited},
			{do: "advance", d: 2 * time.Minute}, {do: "issue", user: "u1"},
		}},
		{"three pending per platform", []step{
			{do: "issue", user: "u1"}, {do: "issue", user: "u2"}, {do: "issue", user: "u3"},
			{do: "issue", user: "u4", wantErr: ErrTooManyCodes},
			{do: "advance", d: 61 * time.Minute}, {do: "issue", user: "u4"},
		}},
		{"codes expire after an hour", []step{
			{do: "issue", user: "u1"}, {do: "advance", d: 61 * time.Minute}, {do: "approve", user: "u1", wantErr: ErrInvalidCode},
		}},
		{"five failures lock the platform for an hour", []step{
			{do: "issue", user: "u1"},
			{do: "wrong", wantErr: ErrInvalidCode}, {do: "wrong", wantErr: ErrInvalidCode}, {do: "wrong", wantErr: ErrInvalidCode},
			{do: "wrong", wantErr: ErrInvalidCode}, {do: "wrong", wantErr: ErrInvalidCode},
			{do: "approve", user: "u1", wantErr: ErrLockedOut},
			{do: "issue", user: "u2", wantErr: ErrLockedOut},
			{do: "advance", d: 30 * time.Minute}, {do: "approve", user: "u1", wantErr: ErrLockedOut},
			{do: "advance", d: 31 * time.Minute}, {do: "issue", user: "u2"}, {do: "approve", user: "u2"},
		}},
		{"revoke", []step{{do: "issue", user: "u1"}, {do: "approve", user: "u1"}, {do: "revoke", user: "u1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			clk := &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
			s := NewStore(db).WithClock(clk.now)
			codes := map[string]string{}
			for i, st := range tt.steps {
				var err error
				switch st.do {
				case "issue":
					var c string
					c, err = s.Issue(ctx, "telegram", st.user, "name-"+st.user)
					if err == nil {
						codes[st.user] = c
					}
				case "approve":
					var p Pairing
					p, err = s.Approve(ctx, "telegram", strings.ToLower(codes[st.user]), "op")
					if err == nil && p.UserID != st.user {
						t.Fatalf("step %d: approved %q, want %q", i, p.UserID, st.user)
					}
				case "wrong":
					_, err = s.Approve(ctx, "telegram", "ZZZZZZZZ", "op")
				case "advance":
					clk.add(st.d)
				case "approved":
					ok, aerr := s.IsApproved(ctx, "telegram", st.user)
					if aerr != nil || !ok {
						t.Fatalf("step %d: %s not approved (%v)", i, st.user, aerr)
					}
					if other, _ := s.IsApproved(ctx, "discord", st.user); other {
						t.Fatalf("approval leaked to another platform")
					}
				case "revoke":
					ok, rerr := s.Revoke(ctx, "telegram", st.user)
					if rerr != nil || !ok {
						t.Fatalf("step %d: revoke: %v %v", i, ok, rerr)
					}
					if still, _ := s.IsApproved(ctx, "telegram", st.user); still {
						t.Fatalf("still approved after revoke")
					}
				}
				if !errors.Is(err, st.wantErr) {
					t.Fatalf("step %d (%s %s): err %v, want %v", i, st.do, st.user, err, st.wantErr)
				}
			}
		})
	}
}

func TestCodesStoredOnlyHashed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := NewStore(db)
	code, err := s.Issue(ctx, "telegram", "u1", "")
	if err != nil {
		t.Fatal(err)
	}
	var salt, hash []byte
	if err := db.QueryRow(ctx, `SELECT salt, code_hash FROM pairing_codes`).Scan(&salt, &hash); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(hash, []byte(code)) || bytes.Contains(salt, []byte(code)) || len(salt) < 16 {
		t.Fatal("code stored in the clear or without salt")
	}
	list, err := s.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].State != "pending" {
		t.Fatalf("list %+v %v", list, err)
	}
}

// On WhatsApp a number is one user however it is written (Hermes): a
// user paired from one device is paired on the others, and the operator
// revokes them by the number they know.
func TestWhatsAppNumbersAreOneUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.New(t))
	code, err := s.Issue(ctx, "whatsapp", "15551234567:12@s.whatsapp.net", "Ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Issue(ctx, "whatsapp", "+15551234567", "Ann"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("second code for the same number: %v, want rate limited", err)
	}
	p, err := s.Approve(ctx, "whatsapp", code, "op")
	if err != nil || p.UserID != "15551234567" {
		t.Fatalf("approve: %+v %v", p, err)
	}
	for _, id := range []string{"15551234567", "+15551234567", "15551234567@s.whatsapp.net", "15551234567:3@s.whatsapp.net"} {
		if ok, err := s.IsApproved(ctx, "whatsapp", id); err != nil || !ok {
			t.Errorf("%s approved %v (%v), want true", id, ok, err)
		}
	}
	if ok, _ := s.IsApproved(ctx, "whatsapp", "15550000000"); ok {
		t.Error("another number approved")
	}
	if ok, err := s.Revoke(ctx, "whatsapp", "+15551234567"); err != nil || !ok {
		t.Fatalf("revoke by +number: %v %v", ok, err)
	}
	if ok, _ := s.IsApproved(ctx, "whatsapp", "15551234567@s.whatsapp.net"); ok {
		t.Error("still approved after revoke")
	}
	// Elsewhere ids are kept as they are.
	if UserID("telegram", "+1@x") != "+1@x" || UserID("whatsapp", "@") != "@" {
		t.Error("UserID changed an id it must keep")
	}
}

// A code whose message could not be sent is not kept: it neither rate
// limits the user nor counts against the platform's pending cap, and the
// next attempt gets a new code at once, which approves. Hermes stores the
// code before sending it, so a failed send costs the user ten minutes.
func TestIssueSentKeepsOnlySentCodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := NewStore(db)
	errDown := errors.New("bus down")
	var lost []string
	for range MaxPending + 1 {
		err := s.IssueSent(ctx, "telegram", "u1", "Ann", "", func(_ context.Context, code string, _ int64) error {
			lost = append(lost, code)
			return errDown
		})
		if !errors.Is(err, errDown) {
			t.Fatalf("failed send: %v, want it returned", err)
		}
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pairing_codes`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d codes kept after failed sends (%v), want none", rows, err)
	}
	var sent string
	var ids []int64
	if err := s.IssueSent(ctx, "telegram", "u1", "Ann", "", func(_ context.Context, code string, id int64) error {
		sent = code
		ids = append(ids, id)
		return nil
	}); err != nil {
		t.Fatalf("issue after failed sends: %v", err)
	}
	if err := s.IssueSent(ctx, "telegram", "u1", "Ann", "", func(context.Context, string, int64) error {
		t.Fatal("a second code was handed out within the rate window")
		return nil
	}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("second code: %v, want rate limited", err)
	}
	for _, code := range lost {
		if code == sent {
			continue // 32^8 codes: a repeat is a coincidence, not a kept code
		}
		if _, err := s.Approve(ctx, "telegram", code, "op"); !errors.Is(err, ErrInvalidCode) {
			t.Fatalf("approving an unsent code: %v, want invalid", err)
		}
	}
	// The failed approvals above (four at most) stay under the lockout's
	// five.
	p, err := s.Approve(ctx, "telegram", sent, "op")
	if err != nil || p.UserID != "u1" {
		t.Fatalf("approve the sent code: %+v %v", p, err)
	}
	if len(ids) != 1 || ids[0] <= 0 {
		t.Fatalf("send got ids %v, want the pending code's", ids)
	}
}

// The redelivery of the event a code was issued for recognises its code
// and sends nothing (ErrIssuedAlready), within the rate window or not;
// another event of the same user in the window is rate limited; a failed
// send for an event keeps nothing, so the event's next try issues a code.
func TestIssueSentRecognisesItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := NewStore(pgtest.New(t)).WithClock(func() time.Time { return now })
	errDown := errors.New("bus down")
	for _, step := range []struct {
		name    string
		advance time.Duration
		user    string
		event   string
		fail    bool
		wantErr error
	}{
		{"send fails", 0, "u1", "telegram:bot:1", true, errDown},
		{"the event again: issued", 0, "u1", "telegram:bot:1", false, nil},
		{"the event redelivered", 0, "u1", "telegram:bot:1", false, ErrIssuedAlready},
		{"another event in the window", time.Minute, "u1", "telegram:bot:2", false, ErrRateLimited},
		{"the event redelivered after the window", UserRateWindow, "u1", "telegram:bot:1", false, ErrIssuedAlready},
		{"same event id, another user", 0, "u2", "telegram:bot:1", false, nil},
		{"no event id is never a redelivery", UserRateWindow, "u3", "", false, nil},
		{"no event id again: rate limited", 0, "u3", "", false, ErrRateLimited},
	} {
		now = now.Add(step.advance)
		sent := false
		err := s.IssueSent(ctx, "telegram", step.user, "Ann", step.event, func(context.Context, string, int64) error {
			sent = true
			if step.fail {
				return errDown
			}
			return nil
		})
		if !errors.Is(err, step.wantErr) || (step.wantErr == nil && err != nil) {
			t.Fatalf("%s: %v, want %v", step.name, err, step.wantErr)
		}
		if wantSent := step.wantErr == nil || step.fail; sent != wantSent {
			t.Fatalf("%s: sent %v, want %v", step.name, sent, wantSent)
		}
	}
}
