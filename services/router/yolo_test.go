package router

import (
	"context"
	"strings"
	"testing"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /yolo turns YOLO mode on and off for the chat (a
// session_yolo row the worker reads), mid-turn too, saying plainly
// that dangerous commands will run without asking; /new keeps it (it
// belongs to the chat); another chat is not affected; turns carry
// yolo_disabled false.
func TestYoloCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.Inputs[0].GetText() == "long task" {
			<-release
		}
	})
	ctx := context.Background()
	store := sessionstore.New(e.db)
	key := "agent:main:telegram:dm:chat-alice"
	on := func(k string) bool {
		t.Helper()
		y, err := store.Yolo(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	for _, tt := range []struct {
		text, want string
		on         bool
	}{
		{"/yolo status", "YOLO mode is off for this chat", false},
		{"/yolo", "⚡ YOLO mode **ON** for this chat — dangerous commands will run without asking for approval.", true},
		{"/new", "New session started", true},
		{"/yolo status", "⚡ YOLO mode is ON for this chat", true},
		{"/yolo", "⚠️ YOLO mode **OFF** for this chat — dangerous commands will require approval.", false},
		{"/yolo off", "YOLO mode **OFF**", false},
		{"/yolo on", "YOLO mode **ON**", true},
		{"/yolo ON", "YOLO mode **ON**", true},
		{"/yolo maybe", "Usage: /yolo", true},
	} {
		if got := e.ask("alice", tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want it to contain %q", tt.text, got, tt.want)
		}
		if on(key) != tt.on {
			t.Errorf("after %s: yolo %v, want %v", tt.text, !tt.on, tt.on)
		}
	}
	if on("agent:main:telegram:dm:chat-bob") {
		t.Error("bob's chat in YOLO mode")
	}
	// Mid-turn, as Hermes's (busy_policy dispatch).
	e.publish(dm("alice", "long task"))
	if tr := turnOf(t, w, "long task"); tr.GetYoloDisabled() {
		t.Error("turn carries yolo_disabled with router.yolo_command on")
	}
	if got := e.ask("alice", "/yolo"); !strings.Contains(got, "YOLO mode **OFF**") || on(key) {
		t.Errorf("/yolo mid-turn: %q, on %v", got, on(key))
	}
	close(release)
}

// router.yolo_command off: /yolo says it is disabled and turns the
// chat's mode off; turns carry yolo_disabled, so the worker asks.
func TestYoloCommandDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.YoloCommand = false
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	ctx := context.Background()
	key := "agent:main:telegram:dm:chat-alice"
	if _, err := e.db.Exec(ctx, `INSERT INTO session_yolo (session_key) VALUES ($1)`, key); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/yolo"); got != yoloDisabledText {
		t.Errorf("/yolo: %q", got)
	}
	if y, err := sessionstore.New(e.db).Yolo(ctx, key); err != nil || y {
		t.Errorf("yolo after a disabled /yolo: %v, %v", y, err)
	}
	e.publish(dm("alice", "hello"))
	if tr := turnOf(t, w, "hello"); !tr.GetYoloDisabled() {
		t.Error("turn without yolo_disabled while router.yolo_command is off")
	}
}
