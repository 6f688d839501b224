package matrix

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// A received file is downloaded from the media repository with the
// bot's token. A 429 (M_LIMIT_EXCEEDED, its Retry-After) or a 5xx is
// asked again, as Hermes's media downloads: before, mautrix's client,
// its retries off, lost the file to the turn. A 404 or a 403 is final.
func TestFetch(t *testing.T) {
	t.Parallel()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("\x89PNG\r\n\x1a\n-cat")
	mxc := f.Upload(data, "image/png")
	for _, tc := range []struct {
		name  string
		mxc   string
		fails []matrixfake.Fail
		// downloads is how many download requests the fetch makes;
		// status is the answer it fails with (0: the file).
		downloads int
		status    int
	}{
		{name: "file", mxc: mxc, downloads: 1},
		{name: "rate limited", mxc: mxc, downloads: 2,
			fails: []matrixfake.Fail{{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 1000}}},
		{name: "502 then the file", mxc: mxc, downloads: 2,
			fails: []matrixfake.Fail{{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"}}},
		{name: "forbidden is final", mxc: mxc, downloads: 1, status: http.StatusForbidden,
			fails: []matrixfake.Fail{{Status: http.StatusForbidden, ErrCode: "M_FORBIDDEN"}}},
		{name: "unknown media", mxc: "mxc://" + matrixfake.Server + "/nope", downloads: 1, status: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fl := range tc.fails {
				f.FailNext("download", 1, fl)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			before := f.Calls("download")
			rc, mime, err := p.Fetch(ctx, &eventsv1.Attachment{PlatformFileId: tc.mxc})
			if n := f.Calls("download") - before; n != tc.downloads {
				t.Errorf("%d download requests, want %d", n, tc.downloads)
			}
			if tc.status != 0 {
				var se *platform.StatusError
				if !errors.As(err, &se) || se.Code != tc.status {
					if err == nil {
						_ = rc.Close()
					}
					t.Fatalf("fetch: %v, want a %d", err, tc.status)
				}
				return
			}
			if err != nil {
				t.Fatalf("fetch: %v, want the file", err)
			}
			defer func() { _ = rc.Close() }()
			got, err := io.ReadAll(rc)
			if err != nil || string(got) != string(data) || mime != "image/png" {
				t.Fatalf("fetched %q of %q (%v), want the %d bytes of image/png", got, mime, err, len(data))
			}
		})
	}
}
