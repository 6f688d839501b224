package approvalmode

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"manual", Manual, true},
		{" SMART ", Smart, true},
		{"Off", Off, true},
		{"", "", false},
		{"auto", "", false},
		{"on", "", false},
		{"smart please", "", false},
	} {
		got, ok := Parse(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFromConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", Manual, false},
		{"smart", Smart, false},
		{"OFF", Off, false},
		{"false", Off, false},
		{"true", Manual, false},
		{"auto", "", true},
	} {
		got, err := FromConfig(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("FromConfig(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestDecodeFailsSafe(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"not json", `{"mode":"auto"}`, `{}`} {
		if got := Decode([]byte(in)); got.Mode != Manual {
			t.Errorf("Decode(%q) = %+v, want manual", in, got)
		}
	}
	if got := Decode([]byte(`{"mode":"smart","by":"telegram:1"}`)); got.Mode != Smart || got.By != "telegram:1" {
		t.Errorf("Decode = %+v", got)
	}
}

// Set by one process, followed by another's watch; a watch started
// after the change starts from it; with none set the default applies;
// a corrupt entry is manual.
func TestWatchFollowsSet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := Get(ctx, kv); err != nil || st != nil {
		t.Fatalf("fresh bucket: %+v, %v", st, err)
	}
	v, err := Watch(ctx, kv, Off, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode() != Off {
		t.Fatalf("mode %q before any set, want the default", v.Mode())
	}
	if err := Set(ctx, kv, State{Mode: Smart, By: "telegram:alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "smart", func() bool { return v.Mode() == Smart })
	other := bustest.NewWith(t, url, b.Topology())
	kv2, err := Open(ctx, other.JetStream(), other.Topology())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := Watch(ctx, kv2, Manual, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Mode() != Smart {
		t.Errorf("a new watch sees %q, want smart", v2.Mode())
	}
	st, err := Get(ctx, kv2)
	if err != nil || st == nil || st.By != "telegram:alice" || st.At.IsZero() {
		t.Errorf("Get = %+v, %v", st, err)
	}
	if err := Set(ctx, kv, State{Mode: "auto"}); err == nil {
		t.Error("Set accepted a mode that is none")
	}
	if _, err := kv.Put(ctx, key, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "manual on a corrupt entry", func() bool { return v.Mode() == Manual && v2.Mode() == Manual })
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the defaults after a delete", func() bool { return v.Mode() == Off && v2.Mode() == Manual })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
