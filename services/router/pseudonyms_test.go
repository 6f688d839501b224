package router

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// TestLogsNamePeopleByPseudonyms runs a turn, a command and a refused
// message through a router whose logger is built as every process's
// (telemetry.NewLogger, log.pseudonymize on): the users' ids never reach
// the log; their sessions are there under their pseudonymized keys.
func TestLogsNamePeopleByPseudonyms(t *testing.T) {
	t.Parallel()
	const (
		allowed = "5550001234"
		refused = "5550009876"
	)
	e := newEnv(t)
	cfg := testConfig()
	cfg.Auth.GatewayAllowedUsers = []string{allowed}
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "debug", Pseudonymize: true, PseudonymKey: "test key"}
	e.startRouterWith(cfg, nil, func(d *Deps) { d.Log = telemetry.NewLogger(logCfg, &logs) })
	w := e.startWorker(nil)

	key := "agent:main:telegram:dm:chat-" + allowed
	e.publish(dm(allowed, "hello"))
	waitFor(t, "the turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 1
	})
	if got := e.ask(allowed, "/busy queue"); !strings.Contains(got, "queue") {
		t.Fatalf("/busy queue: %q", got)
	}
	e.publish(dm(refused, "let me in"))
	p := pseudonym.New(logCfg.PseudonymKey)
	waitFor(t, "the refusal's log line", func() bool {
		return strings.Contains(logs.String(), `"user_id":"`+p.ID(refused)+`"`)
	})

	out := logs.String()
	for _, id := range []string{allowed, refused} {
		if strings.Contains(out, id) {
			t.Errorf("the log names user %s:\n%s", id, out)
		}
	}
	for _, want := range []string{
		`"msg":"turn requested","service":"router","session_key":"` + p.Key(key) + `"`,
		`"msg":"busy mode changed","service":"router","session_key":"` + p.Key(key) + `","mode":"queue","by":"telegram:` + p.ID(allowed) + `"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in the log:\n%s", want, out)
		}
	}
}
