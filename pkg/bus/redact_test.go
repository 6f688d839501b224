package bus_test

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

func TestRedactURL(t *testing.T) {
	tests := map[string]string{
		"nats://127.0.0.1:4222":                 "nats://127.0.0.1:4222",
		"nats://user:s3cret@nats:4222":          "nats://redacted@nats:4222",
		"nats://t0ken@nats:4222":                "nats://redacted@nats:4222",
		"nats://a:4222, nats://u:s3cret@b:4222": "nats://a:4222,nats://redacted@b:4222",
		"nats://u:s3cret@[::1]:4222/%zz":        "(unparsable url)",
	}
	for in, want := range tests {
		got := bus.RedactURL(in)
		if got != want || strings.Contains(got, "s3cret") || strings.Contains(got, "t0ken") {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
