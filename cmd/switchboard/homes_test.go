package main

import "testing"

// Hermes's home-channel variables set each platform's home channel, for
// every service that reads it (router, workers, delivery).
func TestHomeChannelVariables(t *testing.T) {
	tests := []struct{ env, platform, value string }{
		{"TELEGRAM_HOME_CHANNEL", "telegram", "-1001234567890"},
		{"DISCORD_HOME_CHANNEL", "discord", "123456789012345678"},
		{"SLACK_HOME_CHANNEL", "slack", "C0123456789"},
		{"SIGNAL_HOME_CHANNEL", "signal", "+15551234567"},
		{"WHATSAPP_HOME_CHANNEL", "whatsapp", "15551234567"},
		{"EMAIL_HOME_ADDRESS", "email", "owner@example.com"},
		{"MATRIX_HOME_ROOM", "matrix", "!room:example.org"},
		{"LINE_HOME_CHANNEL", "line", "U4af4980629a0c1b2c3d4e5f6a7b8c9d0"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			cfg, _, err := loadConfig("")
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Delivery.HomeOf(tt.platform); got != tt.value {
				t.Fatalf("home of %s = %q, want %q", tt.platform, got, tt.value)
			}
		})
	}
}
