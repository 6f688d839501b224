package sessionkey

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestRunKeyTool(t *testing.T) {
	input := strings.Join([]string{
		// 1: defaults: group per user on.
		`{"source":{"platform":"telegram","chat_type":"group","chat_id":"-1002285219667","user_id":"alice"}}`,
		// 2: bad JSON.
		`{"source":`,
		// 3: flags off, numeric chat id as Hermes stores it.
		`{"source":{"platform":"telegram","chat_type":"group","chat_id":-1002285219667,"user_id":"alice"},"group_sessions_per_user":false}`,
		// 4: blank line.
		``,
		// 5: guild_id as the Slack scope alias, null profile, unknown fields.
		`{"source":{"platform":"slack","chat_type":"group","guild_id":"T0WORKSPACE","chat_id":"C0CHANNEL","user_id":"U0USER01","message_id":"1.2","auto_thread_created":true},"profile":null}`,
		// 6: thread per user on, profile main.
		`{"source":{"platform":"discord","chat_type":"group","chat_id":"9","prospective_thread_id":"7","user_id":"u"},"thread_sessions_per_user":true,"profile":"main"}`,
		// 7: missing source.
		`{"profile":"coder"}`,
		// 8: no platform.
		`{"source":{"chat_id":"1"}}`,
		// 9: wrong flag type.
		`{"source":{"platform":"x"},"group_sessions_per_user":"yes"}`,
		// 10: trailing data.
		`{"source":{"platform":"x"}} {}`,
		// 11: non-integer id.
		`{"source":{"platform":"x","chat_id":1.5}}`,
		// 12: CRLF line ending, scope_id wins over guild_id, explicit profile.
		"{\"source\":{\"platform\":\"slack\",\"chat_type\":\"dm\",\"scope_id\":\"T1\",\"guild_id\":\"T2\",\"chat_id\":\"D1\"},\"profile\":\"coder\"}\r",
		// 13: empty scope_id falls back to guild_id; null ids are absent.
		`{"source":{"platform":"slack","chat_type":"dm","scope_id":"","guild_id":"T2","chat_id":null,"user_id":"U1"}}`,
		// 14: last line without a newline.
		`{"source":{"platform":"whatsapp","chat_id":"+15551234567:12@s.whatsapp.net"}}`,
	}, "\n")

	var out, errOut bytes.Buffer
	err := RunKeyTool(strings.NewReader(input), &out, &errOut)
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("RunKeyTool() error = %v, want ErrBadInput", err)
	}
	if !strings.Contains(err.Error(), "7 of 14 lines") {
		t.Errorf("error %q does not count bad lines", err)
	}

	wantOut := strings.Join([]string{
		"agent:main:telegram:group:-1002285219667:alice",
		"",
		"agent:main:telegram:group:-1002285219667",
		"",
		"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:U0USER01",
		"agent:main~:discord:thread:9:7:u",
		"", "", "", "", "",
		"agent:coder:slack:dm:T1:D1",
		"agent:main:slack:dm:T2:U1",
		"agent:main:whatsapp:dm:15551234567",
	}, "\n") + "\n"
	if out.String() != wantOut {
		t.Errorf("out =\n%s\nwant\n%s", out.String(), wantOut)
	}

	errLines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
	wantErr := []string{"line 2: ", "line 4: parse request: empty line", "line 7: parse request: missing \"source\"",
		"line 8: parse request: source has no platform", "line 9: ", "line 10: parse request: data after", "line 11: "}
	if len(errLines) != len(wantErr) {
		t.Fatalf("errOut has %d lines, want %d:\n%s", len(errLines), len(wantErr), errOut.String())
	}
	for i, w := range wantErr {
		if !strings.HasPrefix(errLines[i], w) {
			t.Errorf("errOut line %d = %q, want prefix %q", i+1, errLines[i], w)
		}
	}
}

func TestRunKeyToolAllGood(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty input", "", ""},
		{"one line with newline", `{"source":{"platform":"telegram","chat_id":"99"}}` + "\n", "agent:main:telegram:dm:99\n"},
		{"defaults", `{"source":{"platform":"telegram","chat_type":"group","chat_id":"C","thread_id":"T","user_id":"u"}}`, "agent:main:telegram:group:C:T\n"},
		{"explicit flags", `{"source":{"platform":"telegram","chat_type":"group","chat_id":"C","thread_id":"T","user_id":"u"},"group_sessions_per_user":true,"thread_sessions_per_user":true}`, "agent:main:telegram:group:C:T:u\n"},
		{"null flags default", `{"source":{"platform":"telegram","chat_type":"group","chat_id":"C","user_id":"u"},"group_sessions_per_user":null,"thread_sessions_per_user":null}`, "agent:main:telegram:group:C:u\n"},
		{"profile default", `{"source":{"platform":"telegram","chat_id":"1"},"profile":"default"}`, "agent:main:telegram:dm:1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := RunKeyTool(strings.NewReader(tt.in), &out, &errOut); err != nil {
				t.Fatalf("RunKeyTool() error = %v (stderr %q)", err, errOut.String())
			}
			if out.String() != tt.want {
				t.Errorf("out = %q, want %q", out.String(), tt.want)
			}
			if errOut.Len() != 0 {
				t.Errorf("errOut = %q, want empty", errOut.String())
			}
		})
	}
}

// TestRunKeyToolLongLines checks lines far past bufio.Scanner's 64 KiB
// limit, and the cap that keeps one line from eating memory.
func TestRunKeyToolLongLines(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	good := fmt.Sprintf(`{"source":{"platform":"web","chat_id":"c","chat_name":%q}}`, long)
	in := good + "\n" + good + "\n"

	var out, errOut bytes.Buffer
	if err := RunKeyTool(strings.NewReader(in), &out, &errOut); err != nil {
		t.Fatalf("RunKeyTool() error = %v (stderr %.200q)", err, errOut.String())
	}
	if want := "agent:main:web:dm:c\nagent:main:web:dm:c\n"; out.String() != want {
		t.Errorf("out = %q, want %q", out.String(), want)
	}

	// With a 100-byte cap, the long line is bad and the next one still works.
	short := `{"source":{"platform":"web","chat_id":"c"}}`
	out.Reset()
	errOut.Reset()
	err := runKeyTool(strings.NewReader(good+"\n"+short+"\n"+good), &out, &errOut, 100)
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("runKeyTool() error = %v, want ErrBadInput", err)
	}
	if want := "\nagent:main:web:dm:c\n\n"; out.String() != want {
		t.Errorf("out = %q, want %q", out.String(), want)
	}
	if want := "line 1: line longer than 100 bytes\nline 3: line longer than 100 bytes\n"; errOut.String() != want {
		t.Errorf("errOut = %q, want %q", errOut.String(), want)
	}
}

func TestRunKeyToolLineAtCap(t *testing.T) {
	line := `{"source":{"platform":"web","chat_id":"c"}}`
	for _, ending := range []string{"", "\n", "\r\n"} {
		t.Run(fmt.Sprintf("%q", ending), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := runKeyTool(strings.NewReader(line+ending), &out, &errOut, len(line)); err != nil {
				t.Fatalf("line of exactly the cap: %v (%s)", err, errOut.String())
			}
			errOut.Reset()
			err := runKeyTool(strings.NewReader(line+ending), &out, &errOut, len(line)-1)
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("line one past the cap: error = %v, want ErrBadInput", err)
			}
		})
	}
}

func TestRunKeyToolReadError(t *testing.T) {
	boom := errors.New("boom")
	in := io.MultiReader(strings.NewReader(`{"source":{"platform":"web","chat_id":"c"}}`+"\n"), iotest.ErrReader(boom))
	var out, errOut bytes.Buffer
	err := RunKeyTool(in, &out, &errOut)
	if !errors.Is(err, boom) {
		t.Fatalf("RunKeyTool() error = %v, want boom", err)
	}
	if out.String() != "agent:main:web:dm:c\n" {
		t.Errorf("keys before the read error were lost: %q", out.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRunKeyToolWriteError(t *testing.T) {
	in := `{"source":{"platform":"web","chat_id":"c"}}` + "\n"
	if err := RunKeyTool(strings.NewReader(in), failWriter{}, io.Discard); err == nil || errors.Is(err, ErrBadInput) {
		t.Errorf("out write error: got %v", err)
	}
	if err := RunKeyTool(strings.NewReader("\n"), io.Discard, failWriter{}); err == nil || errors.Is(err, ErrBadInput) {
		t.Errorf("errOut write error: got %v", err)
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		wantErr bool
		want    string // key, when no error
	}{
		{"minimal", `{"source":{"platform":"web"}}`, false, "agent:main:web:dm"},
		{"integer ids", `{"source":{"platform":"telegram","chat_type":"group","chat_id":-100,"user_id":42,"thread_id":7},"thread_sessions_per_user":true}`, false, "agent:main:telegram:group:-100:7:42"},
		{"is_bot accepted", `{"source":{"platform":"discord","chat_id":"1","is_bot":true}}`, false, "agent:main:discord:dm:1"},
		{"whitespace around", "  \t{\"source\":{\"platform\":\"web\"}}  ", false, "agent:main:web:dm"},
		{"null source", `{"source":null}`, true, ""},
		{"array", `[]`, true, ""},
		{"string source", `{"source":"x"}`, true, ""},
		{"bool id", `{"source":{"platform":"x","chat_id":true}}`, true, ""},
		{"exponent id", `{"source":{"platform":"x","chat_id":1e3}}`, true, ""},
		{"object id", `{"source":{"platform":"x","chat_id":{}}}`, true, ""},
		{"numeric profile", `{"source":{"platform":"x"},"profile":1}`, true, ""},
		{"bad is_bot", `{"source":{"platform":"x","is_bot":"no"}}`, true, ""},
		{"only spaces", "   ", true, ""},
		{"two objects", `{"source":{"platform":"x"}}{"source":{"platform":"y"}}`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, opts, err := ParseRequest([]byte(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseRequest() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := Build(src, opts); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}
