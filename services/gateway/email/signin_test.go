package email

import (
	"errors"
	"testing"

	"github.com/emersion/go-imap/v2"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// TestIMAPLoginError: a refused login ends the gateway; a server that is
// only busy (Gmail's fifteen-connection limit, Dovecot's UNAVAILABLE, a
// LIMIT) is tried again.
func TestIMAPLoginError(t *testing.T) {
	t.Parallel()
	p := &Platform{cfg: Config{IMAPHost: "imap.example.com", Address: "agent@example.com"}}
	for _, c := range []struct {
		name  string
		err   error
		fatal bool
	}{
		{"credentials refused", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeAuthenticationFailed,
			Text: "Invalid credentials (Failure)"}, true},
		{"no code", &imap.Error{Type: imap.StatusResponseTypeNo, Text: "LOGIN failed."}, true},
		{"Gmail wants an app password", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeAlert,
			Text: "Application-specific password required: https://support.google.com/accounts/answer/185833 (Failure)"}, true},
		{"Gmail's connection limit", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeAlert,
			Text: "Too many simultaneous connections. (Failure)"}, false},
		{"Gmail's bandwidth limit", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeAlert,
			Text: "Account exceeded command or bandwidth limits. (Failure)"}, false},
		{"a limit", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeLimit, Text: "Too many connections"}, false},
		{"unavailable", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeUnavailable,
			Text: "Maximum number of connections from user+IP exceeded (mail_max_userip_connections=10)"}, false},
		{"in use", &imap.Error{Type: imap.StatusResponseTypeNo, Code: imap.ResponseCodeInUse, Text: "Mailbox in use"}, false},
		{"bad", &imap.Error{Type: imap.StatusResponseTypeBad, Text: "parse error"}, false},
		{"connection lost", errors.New("EOF"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := p.imapLoginError(c.err)
			if platform.IsFatal(err) != c.fatal {
				t.Errorf("fatal %v, want %v (%v)", platform.IsFatal(err), c.fatal, err)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("%v does not wrap %v", err, c.err)
			}
		})
	}
}
