package api

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// defaultBodyTimeout is gateways.api.body_timeout's default: a 4 MiB
// picture over a slow phone link arrives well within it.
const defaultBodyTimeout = time.Minute

// bodyDeadline bounds how long the body of a request may take to arrive:
// a client that sends its headers and then its body slowly, or never,
// would otherwise hold its connection and goroutine for as long as it
// likes — the handler waiting in its read, or, for a request refused
// before its body was read (a wrong key), the server discarding the
// unread body. The server's ReadTimeout cannot do it: its deadline also
// cuts the connection, and cancels the request, while an answer is
// awaited or streamed for minutes after the body is in. So the deadline
// is the connection's read deadline from the headers until the body's
// end, then lifted.
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || d <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		// A copy of the request: the server's own keeps its body, by
		// whose type it decides, after the handler, whether to read the
		// rest of an unread body or close the connection.
		r = r.WithContext(r.Context())
		r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body has been read to
// its end.
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	lift func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}
