package secret_test

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/secret"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		gone     []string // must not survive
		want     string   // when set, the exact output
	}{
		{name: "openai key", in: "my key is sk-proj-abcdefghijklmnopqrstuvwxyz1234 ok",
			gone: []string{"abcdefghijklmnopqrstuvwxyz"}, want: "my key is sk-pro...1234 ok"},
		{name: "short token fully masked", in: "ghp_abcdefghij", want: "***"},
		{name: "aws", in: "AKIAABCDEFGHIJKLMNOP", gone: []string{"ABCDEFGHIJKLMN"}},
		{name: "slack", in: "token xoxb-1234567890-abcdefghijk", gone: []string{"1234567890-abcdefghijk"}},
		{name: "env assignment", in: "export OPENAI_API_KEY=\"supersecretvalue123456\"", gone: []string{"supersecretvalue"},
			want: "export OPENAI_API_KEY=\"supers...3456\""},
		{name: "authorization header", in: "Authorization: Bearer abc.def.ghijklmnopqrstuvwxyz", gone: []string{"ghijklmnopqrstuv"}},
		{name: "url password", in: "postgres://app:hunter2@db:5432/x", want: "postgres://app:***@db:5432/x"},
		{name: "query param", in: "https://x.test/cb?code=1&access_token=abcdef123456&y=2", gone: []string{"abcdef123456"}},
		{name: "json field", in: `{"api_key": "0123456789abcdef0123", "name": "bob"}`, gone: []string{"0123456789abcdef0123"}},
		{name: "jwt", in: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", gone: []string{"eyJzdWIiOiIxMjM0NTY3ODkwIn0"}},
		{name: "private key", in: "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", want: "[REDACTED PRIVATE KEY]"},
		{name: "prose untouched", in: "the password is a word; tokens are counted; sketch-it", want: "the password is a word; tokens are counted; sketch-it"},
		{name: "empty", in: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := secret.Redact(tt.in)
			for _, g := range tt.gone {
				if strings.Contains(got, g) {
					t.Errorf("Redact(%q) = %q, still has %q", tt.in, got, g)
				}
			}
			if tt.want != "" || tt.in == "" {
				if got != tt.want {
					t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
				}
			}
			if again := secret.Redact(got); again != got {
				t.Errorf("Redact is not stable: %q then %q", got, again)
			}
		})
	}
}
