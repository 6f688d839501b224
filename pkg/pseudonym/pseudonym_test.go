package pseudonym_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

var isPseudonym = regexp.MustCompile(`^#[0-9a-f]{12}$`)

func TestID(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("")
	id := p.ID("123456789")
	if !isPseudonym.MatchString(id) {
		t.Fatalf("ID = %q, want # and 12 hex digits", id)
	}
	if again := pseudonym.New("").ID("123456789"); again != id {
		t.Errorf("unkeyed ID not stable across Pseudonymizers: %q then %q", id, again)
	}
	if other := p.ID("123456780"); other == id {
		t.Errorf("two ids share the pseudonym %q", id)
	}
	keyed := pseudonym.New("operator secret").ID("123456789")
	if keyed == id || !isPseudonym.MatchString(keyed) {
		t.Errorf("keyed ID = %q, want a pseudonym other than the unkeyed %q", keyed, id)
	}
	if got := p.ID(""); got != "" {
		t.Errorf(`ID("") = %q, want ""`, got)
	}
	var off *pseudonym.Pseudonymizer
	if got := off.ID("123456789"); got != "123456789" {
		t.Errorf("nil Pseudonymizer changed an id: %q", got)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	id := p.ID
	tests := []struct{ key, want string }{
		{"agent:main:telegram:dm:123456789", "agent:main:telegram:dm:" + id("123456789")},
		{"agent:main:telegram:dm:" + id("123456789"), "agent:main:telegram:dm:" + id("123456789")},
		{"agent:main:telegram:group:-1002285219667:alice", "agent:main:telegram:group:" + id("-1002285219667") + ":" + id("alice")},
		{"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:U0USER01", "agent:main:slack:group:" + id("T0WORKSPACE") + ":" + id("C0CHANNEL") + ":" + id("U0USER01")},
		{"agent:main:whatsapp:dm:15551234567", "agent:main:whatsapp:dm:" + id("15551234567")},
		{"agent:main~:matrix:dm:!room:example.org", "agent:main~:matrix:dm:" + id("!room") + ":" + id("example.org")},
		{"agent:coder:telegram:dm:99", "agent:coder:telegram:dm:" + id("99")},
		{"agent:main:background:telegram:dm:99:bg_1", "agent:main:background:telegram:dm:" + id("99") + ":" + id("bg_1")},
		{"send:telegram:99", "send:telegram:" + id("99")},
		// No personal part: nothing to hide.
		{"agent:main:telegram:dm", "agent:main:telegram:dm"},
		{"agent:main", "agent:main"},
		{"agent:main:telegram:dm:", "agent:main:telegram:dm:"},
		// Not a session key: one id.
		{"a5b8c0f2-session-id", id("a5b8c0f2-session-id")},
		{"", ""},
	}
	for _, tt := range tests {
		if got := p.Key(tt.key); got != tt.want {
			t.Errorf("Key(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestUserKey(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	id := p.ID
	tests := []struct{ in, want string }{
		{"telegram:42", "telegram:" + id("42")},
		{"whatsapp:15551234567@s.whatsapp.net", "whatsapp:" + id("15551234567@s.whatsapp.net")},
		{"session:agent:main:telegram:group:-100:7", "session:" + p.Key("agent:main:telegram:group:-100:7")},
		{"user:telegram:42", "user:telegram:" + id("42")},
		{"session:0b8f2d3e-uuid", "session:0b8f2d3e-uuid"},
		{"agent:main:telegram:dm:42", p.Key("agent:main:telegram:dm:42")},
		{"admin", "admin"},
		{"admin:alice", "admin:alice"},
		{"token:ci", "token:ci"},
		{"global", "global"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := p.UserKey(tt.in); got != tt.want {
			t.Errorf("UserKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	k := p.Key
	tests := []struct{ in, want string }{
		{"claim lock agent:main:telegram:dm:99: context canceled", "claim lock " + k("agent:main:telegram:dm:99") + ": context canceled"},
		{`session "agent:main:whatsapp:dm:15551234567" not found`, `session "` + k("agent:main:whatsapp:dm:15551234567") + `" not found`},
		{"two: agent:main:telegram:dm:1, agent:main:telegram:dm:2.", "two: " + k("agent:main:telegram:dm:1") + ", " + k("agent:main:telegram:dm:2") + "."},
		{"(agent:main:telegram:dm:99)", "(" + k("agent:main:telegram:dm:99") + ")"},
		{"profile agent:main is fine", "profile agent:main is fine"},
		{"useragent:a:b:c stays", "useragent:a:b:c stays"},
		{"no key here", "no key here"},
	}
	for _, tt := range tests {
		if got := p.Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzKey checks that Key never panics, is deterministic, keeps the
// number of parts and the readable ones, and replaces every other part
// by a pseudonym; and that Text finds such a key inside an error message.
func FuzzKey(f *testing.F) {
	f.Add("main", "telegram", "dm", "123456789", "")
	f.Add("main~", "slack", "group", "T0WORKSPACE:C0CHANNEL", "U0USER01")
	f.Add("coder", "whatsapp", "group", "120363000000000000@g.us", "15551234567")
	f.Add("main", "background", "telegram", "dm:99", "bg_1")
	f.Add("main", "matrix", "dm", "!room:example.org", "")
	f.Add("main", "telegram", "dm", "", "")
	f.Add("", "", "", "::", ":")
	p := pseudonym.New("fuzz")
	f.Fuzz(func(t *testing.T, profile, platform, slot, chat, participant string) {
		key := "agent:" + profile + ":" + platform + ":" + slot
		for _, s := range []string{chat, participant} {
			if s != "" {
				key += ":" + s
			}
		}
		got := p.Key(key)
		if again := p.Key(key); again != got {
			t.Fatalf("Key(%q) not deterministic: %q then %q", key, got, again)
		}
		in, out := strings.Split(key, ":"), strings.Split(got, ":")
		if len(in) != len(out) {
			t.Fatalf("Key(%q) = %q: %d parts, want %d", key, got, len(out), len(in))
		}
		keep := 4
		if in[2] == "background" {
			keep = 5
		}
		for i := range in {
			switch {
			case i < keep:
				if out[i] != in[i] {
					t.Fatalf("Key(%q) = %q: readable part %d changed", key, got, i)
				}
			case in[i] == "":
				if out[i] != "" {
					t.Fatalf("Key(%q) = %q: empty part %d became %q", key, got, i, out[i])
				}
			case isPseudonym.MatchString(in[i]):
				if out[i] != in[i] {
					t.Fatalf("Key(%q) = %q: part %d, a pseudonym, became %q", key, got, i, out[i])
				}
			case !isPseudonym.MatchString(out[i]) || out[i] != p.ID(in[i]):
				t.Fatalf("Key(%q) = %q: part %d is %q, want %q", key, got, i, out[i], p.ID(in[i]))
			}
		}

		if again := p.Key(got); again != got {
			t.Fatalf("Key(%q) = %q, and Key of that %q: pseudonymized twice", key, got, again)
		}

		// Inside an error message, a key whose parts hold no separator
		// and no trailing punctuation is found whole.
		for _, part := range in {
			if part == "" || strings.ContainsAny(part, " \t\n\f\r\"'`") || strings.ContainsAny(part[len(part)-1:], ".,;)") {
				return
			}
		}
		msg := "claim lock " + key + ": context canceled"
		if want := "claim lock " + got + ": context canceled"; p.Text(msg) != want {
			t.Fatalf("Text(%q) = %q, want %q", msg, p.Text(msg), want)
		}
	})
}

// TestIDCostsOneAllocation: every log record with a session key or an id
// computes pseudonyms; an ID allocates its result only, not an HMAC (its
// key schedule and hash states) per call, which made a record several
// times as costly as its encoding.
func TestIDCostsOneAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	p := pseudonym.New("k")
	want := p.ID("123456789")
	if allocs := testing.AllocsPerRun(100, func() {
		if got := p.ID("123456789"); got != want {
			t.Fatalf("ID = %q, then %q", want, got)
		}
	}); allocs > 1 {
		t.Errorf("ID allocates %v times, want 1 (the result)", allocs)
	}
}

// TestIDConcurrent: one Pseudonymizer serves every goroutine that logs,
// each id getting "#" and the first 12 hex digits of HMAC-SHA256(key, id).
func TestIDConcurrent(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	want := map[string]string{}
	ids := []string{"1", "15551234567", "bob@example.com", strings.Repeat("x", 5000)}
	for _, id := range ids {
		m := hmac.New(sha256.New, []byte("k"))
		m.Write([]byte(id))
		want[id] = "#" + hex.EncodeToString(m.Sum(nil))[:12]
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				id := ids[(g+i)%len(ids)]
				if got := p.ID(id); got != want[id] {
					t.Errorf("ID(%.10q) = %q, want %q", id, got, want[id])
					return
				}
			}
		}()
	}
	wg.Wait()
}
