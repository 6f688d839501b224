package telegram

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// On connecting the gateway sets the bot's command menu to every
// command (command.Menu), the ones added today among them in Hermes's
// words, within Telegram's limits (the fake refuses as Telegram does);
// a refused setMyCommands is tried again at the next connect and does
// not keep the bot from polling.
func TestCommandMenu(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.FailNext("setMyCommands", telegramfake.APIError{Code: 500, Description: "Internal Server Error"})
	b := bustest.New(t, bustest.EmbeddedURL(t))
	_, stop := startService(t, testConfig(f), b, "a")
	waitFor(t, "polling despite the refused menu", 20*time.Second, func() bool { return f.Calls("getUpdates") > 0 })
	if got := f.Commands(); len(got) != 0 {
		t.Fatalf("menu %v after a refused setMyCommands", got)
	}
	stop()
	startService(t, testConfig(f), b, "b")
	waitFor(t, "the menu", 20*time.Second, func() bool { return len(f.Commands()) > 0 })
	got := f.Commands()
	want := command.Menu()
	if len(got) != len(want) {
		t.Fatalf("menu of %d commands, want %d", len(got), len(want))
	}
	for i, e := range want {
		if got[i].Command != e.Name || got[i].Description != e.Description {
			t.Errorf("menu entry %d: %+v, want %+v", i, got[i], e)
		}
	}
	for _, name := range []string{"voice", "fast", "btw", "agents", "background", "status"} {
		if !slices.ContainsFunc(got, func(c telegramfake.BotCommand) bool { return c.Command == name }) {
			t.Errorf("/%s missing from the menu", name)
		}
	}
}

// A skill reload's new menu (SetMenu) is set at once, on a connected
// gateway; a refused one is set again at the next connect.
func TestSetMenuRefreshesTheMenu(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, stop := startService(t, testConfig(f), b, "a")
	waitFor(t, "the start-up menu", 20*time.Second, func() bool { return len(f.Commands()) == len(command.Menu()) })
	names := func() []string {
		var out []string
		for _, c := range f.Commands() {
			out = append(out, c.Command)
		}
		return out
	}
	menu := append(command.Menu(), command.MenuEntry{Name: "deploy", Description: "Ship the build"})
	s.SetMenu(context.Background(), menu)
	if got := names(); len(got) != len(menu) || got[len(got)-1] != "deploy" {
		t.Fatalf("menu after a reload: %v", got)
	}
	if n := f.Calls("setMyCommands"); n != 2 {
		t.Fatalf("%d setMyCommands calls, want 2", n)
	}

	// A refused refresh is set by the next connect (Connect's setCommands).
	f.FailNext("setMyCommands", telegramfake.APIError{Code: 500, Description: "Internal Server Error"})
	s.SetMenu(context.Background(), command.Menu())
	if got := names(); got[len(got)-1] != "deploy" {
		t.Fatalf("a refused refresh changed the menu: %v", got)
	}
	stop()
	s.p.setCommands(context.Background())
	if got := names(); slices.Contains(got, "deploy") || len(got) != len(command.Menu()) {
		t.Fatalf("menu %v after the next connect, want deploy gone", got)
	}
	s.p.setCommands(context.Background()) // set: not sent again
	if n := f.Calls("setMyCommands"); n != 4 {
		t.Fatalf("%d setMyCommands calls, want 4", n)
	}
}
