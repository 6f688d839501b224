package email

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-smtp"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// SignIn logs in to the IMAP and the SMTP server before the gateway
// serves anything, as Hermes connects to both at start: the kit calls it
// again on its backoff schedule while a server is out of reach (the
// gateway unready meanwhile), and ends Run when one refuses the
// credentials, rather than answer no mail or fail every send later.
// Every replica signs in, the standby ones too: each serves sends.
func (p *Platform) SignIn(ctx context.Context) error {
	s, err := p.dial()
	if err != nil {
		return err
	}
	_ = s.do(func() error { return s.c.Logout().Wait() })
	_ = s.c.Close()
	c, done, err := p.smtpDial(ctx)
	if err != nil {
		return p.smtpLoginError(err)
	}
	_ = c.Quit()
	done()
	return nil
}

// credentialsHint names the settings a refused login is about.
const credentialsHint = "check gateways.email.address and gateways.email.password (EMAIL_ADDRESS, EMAIL_PASSWORD; an app password where the provider wants one)"

// imapLoginError classifies a failed IMAP LOGIN: a NO is the server
// refusing the credentials (AUTHENTICATIONFAILED, AUTHORIZATIONFAILED,
// EXPIRED, an ALERT such as Gmail's "application-specific password
// required", or no code at all), which no retry mends, unless its code
// says the server is only unavailable for now (UNAVAILABLE, INUSE,
// LIMIT) or it is a limit Gmail states in words under an ALERT (fifteen
// connections per account, the command and bandwidth limits): a person's
// phone and laptop holding connections must not end the gateway for
// good. Anything else (BAD, the connection lost) is tried again.
func (p *Platform) imapLoginError(err error) error {
	var ie *imap.Error
	if errors.As(err, &ie) && ie.Type == imap.StatusResponseTypeNo && !busy(ie) {
		return platform.Fatal(fmt.Errorf("email: the IMAP server %s refused the login as %s (%s): %w",
			p.cfg.IMAPHost, p.cfg.Address, credentialsHint, err))
	}
	return fmt.Errorf("imap login: %w", err)
}

// busyTexts are the words of a login refused for a limit, not for the
// credentials (Gmail's, which has no code for it).
var busyTexts = []string{"simultaneous connections", "bandwidth limits"}

// busy reports whether a NO to LOGIN says the server is busy or at a
// limit for now.
func busy(e *imap.Error) bool {
	switch e.Code {
	case imap.ResponseCodeUnavailable, imap.ResponseCodeInUse, imap.ResponseCodeLimit:
		return true
	}
	text := strings.ToLower(e.Text)
	for _, t := range busyTexts {
		if strings.Contains(text, t) {
			return true
		}
	}
	return false
}

// smtpLoginError classifies a failed SMTP sign-in: 535 (credentials
// refused) and 534 (the provider wants another mechanism or an app
// password) are for good; anything else (a 4xx, the server out of reach) is tried again.
func (p *Platform) smtpLoginError(err error) error {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		switch se.Code {
		case 535, 534:
			return platform.Fatal(fmt.Errorf("email: the SMTP server %s refused the login as %s (%s): %w",
				p.cfg.SMTPHost, p.cfg.Address, credentialsHint, err))
		}
	}
	return err
}
