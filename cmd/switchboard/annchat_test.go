package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// annChat is Ann's private chat (id 99) with the bot, as a whole-system
// test drives it through the fake Bot API: what the chat shows, waiting
// for it until ctx ends, and Ann's messages.
type annChat struct {
	t     *testing.T
	ctx   context.Context
	tg    *telegramfake.Server
	d     *devProcess
	msgID int
}

// shown is the text of every message the chat shows, in order.
func (c *annChat) shown() []string {
	var out []string
	for _, m := range c.tg.Messages("99") {
		out = append(out, m.Shown)
	}
	return out
}

// waitFor returns what the chat shows once cond holds for it; the test
// fails, with the chat and the process's stderr, when ctx ends first.
func (c *annChat) waitFor(what string, cond func([]string) bool) []string {
	c.t.Helper()
	for {
		if got := c.shown(); cond(got) {
			return got
		}
		if c.ctx.Err() != nil {
			c.t.Fatalf("timed out waiting for %s; the chat shows %q\nstderr:\n%s", what, c.shown(), c.d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// say sends text as Ann's next message.
func (c *annChat) say(text string) {
	c.msgID++
	c.tg.Inject(map[string]any{"message": map[string]any{
		"message_id": c.msgID, "date": time.Now().Unix(), "text": text,
		"chat": map[string]any{"id": 99, "type": "private", "first_name": "Ann"},
		"from": map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"},
	}})
}

// countContaining counts the messages that contain substr.
func countContaining(s []string, substr string) int {
	n := 0
	for _, m := range s {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// indexContaining is the index of the first message that contains substr, -1
// without one.
func indexContaining(s []string, substr string) int {
	for i, m := range s {
		if strings.Contains(m, substr) {
			return i
		}
	}
	return -1
}
