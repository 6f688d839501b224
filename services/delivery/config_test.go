package delivery_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/delivery"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*delivery.Config)
		err  string // "" when valid
	}{
		{"defaults", func(*delivery.Config) {}, ""},
		{"lease shorter than a send", func(c *delivery.Config) { c.Lease = 5 * time.Second }, "delivery.lease"},
		{"gRPC off", func(c *delivery.Config) { c.GRPCAddr = "" }, ""},
		{"gRPC on every interface without a token", func(c *delivery.Config) { c.GRPCAddr = ":7071" }, "delivery.grpc_addr"},
		{"gRPC on a network address without a token", func(c *delivery.Config) { c.GRPCAddr = "10.0.0.5:7071" }, "delivery.grpc_addr"},
		{"gRPC on every interface with a token", func(c *delivery.Config) { c.GRPCAddr, c.Token = ":7071", "s3cret" }, ""},
		{"bad streaming mode", func(c *delivery.Config) {
			c.Platforms = map[string]delivery.Platform{"x": {Streaming: "sometimes"}}
		}, "delivery.platforms.x.streaming"},
		{"tool progress modes", func(c *delivery.Config) {
			c.ToolProgress = "verbose"
			c.Platforms = map[string]delivery.Platform{"telegram": {ToolProgress: "new"}, "slack": {ToolProgress: "false"}, "x": {ToolProgress: "ON"}}
		}, ""},
		{"bad tool progress", func(c *delivery.Config) { c.ToolProgress = "log" }, "delivery.tool_progress"},
		{"bad platform tool progress", func(c *delivery.Config) {
			c.Platforms = map[string]delivery.Platform{"x": {ToolProgress: "some"}}
		}, "delivery.platforms.x.tool_progress"},
		{"negative preview length", func(c *delivery.Config) { c.ToolPreviewLength = -1 }, "delivery.tool_preview_length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := delivery.DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one naming %s", err, tt.err)
			}
		})
	}
}
