package mailfake

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2/imapclient"
)

// A message delivered just as a client's IDLE starts, after the server
// reported what was pending and before it listens for more, is reported
// during that IDLE: a client told of nothing would wait for its next
// IDLE refresh (the gateway's is ten minutes) with the mail unread.
func TestIdleReportsMailDeliveredAsItStarts(t *testing.T) {
	t.Parallel()
	f, err := New(Options{Address: "agent@example.com", Password: "pw", Idle: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	exists := make(chan uint32, 8)
	c, err := imapclient.DialInsecure(net.JoinHostPort(f.IMAPHost, strconv.Itoa(f.IMAPPort)), &imapclient.Options{
		UnilateralDataHandler: &imapclient.UnilateralDataHandler{Mailbox: func(d *imapclient.UnilateralDataMailbox) {
			if d.NumMessages != nil {
				exists <- *d.NumMessages
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Login("agent@example.com", "pw").Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Select("INBOX", nil).Wait(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	delivered := make(chan error, 1)
	deliver := func() {
		once.Do(func() {
			_, err := f.Deliver([]byte("From: ann@example.com\r\nSubject: Re: now\r\n\r\njust as you idle\r\n"))
			delivered <- err
		})
	}
	f.idlePolled.Store(&deliver)
	idle, err := c.Idle()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-exists:
		if n != 1 {
			t.Fatalf("EXISTS %d, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the message delivered as IDLE started was never reported")
	}
	if err := idle.Close(); err != nil {
		t.Fatal(err)
	}
	if err := idle.Wait(); err != nil {
		t.Fatal(err)
	}
}
