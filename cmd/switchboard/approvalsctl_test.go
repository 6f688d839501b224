package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// `switchboard approvals [manual|smart|off]` against a real admin API on
// a real database and NATS: what it prints, the entry it leaves for the
// workers, and usage errors that change nothing.
func TestApprovalsVerb(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := approvalmode.Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	addr := startAdminAPI(t, ctx, admin.Config{ApprovalsMode: "off"}, admin.Deps{DB: pgtest.New(t),
		Approvals: func(context.Context) (jetstream.KeyValue, error) { return kv, nil }})
	for _, tt := range []struct {
		args    []string
		want    []string // in stdout
		wantErr error
		stored  string // the mode stored afterwards; "" for none
	}{
		{nil, []string{"Approval mode: off (persistent gateway-wide setting).\n", "No one has set one: this is approvals.mode of the configuration."}, nil, ""},
		{[]string{"Smart"}, []string{"Approval mode: smart (persistent gateway-wide setting).\n", "It was off; every worker follows"}, nil, "smart"},
		{nil, []string{"Approval mode: smart (persistent gateway-wide setting).\n", "    Set by admin:tester at "}, nil, "smart"},
		{[]string{"manual"}, []string{"Approval mode: manual", "It was smart;"}, nil, "manual"},
		{[]string{"Default"}, []string{"Approval mode: off (persistent gateway-wide setting).\n", "this is approvals.mode of the configuration", "It was manual; every worker follows the configured default"}, nil, ""},
		{[]string{"default"}, []string{"Approval mode: off (persistent gateway-wide setting).\n", "Nothing changed: no one had set a mode."}, nil, ""},
		{[]string{"manual"}, []string{"Approval mode: manual", "It was off;"}, nil, "manual"},
		{[]string{"yolo"}, nil, errUsage, "manual"},
		{[]string{"default", "now"}, nil, errUsage, "manual"},
		{[]string{"off", "now"}, nil, errUsage, "manual"},
	} {
		var out, errOut bytes.Buffer
		err := approvalsCommand(ctx, append(tt.args, "--admin-addr", addr), &out, &errOut)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%v: err %v, want %v (stderr %s)", tt.args, err, tt.wantErr, errOut.String())
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v printed:\n%s\nwant it to contain %q", tt.args, out.String(), w)
			}
		}
		st, err := approvalmode.Get(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if st != nil {
			got = string(st.Mode)
			if st.By != "admin:tester" {
				t.Errorf("%v: set by %q, want admin:tester", tt.args, st.By)
			}
		}
		if got != tt.stored {
			t.Errorf("%v: stored %q, want %q", tt.args, got, tt.stored)
		}
	}

	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "wrong")
	var out, errOut bytes.Buffer
	if err := approvalsCommand(ctx, []string{"--admin-addr", addr}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("wrong token: %v", err)
	}
}

// `switchboard approvals list` and `revoke` against a real admin API on
// a real database: the standing approvals /approve always and /approve
// session granted, listed and narrowed, revoked one or all of a
// subject; usage errors change nothing.
func TestApprovalsListAndRevokeVerbs(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	for _, q := range []string{
		`INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role)
			VALUES ('agent:main:telegram:dm:42', 'conv-a', 't1', 1, 0, 'user')`,
		`INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES
			('user', 'telegram:42', 'terminal'), ('user', 'telegram:42', 'write_file'), ('session', 'conv-a', 'terminal')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db})
	left := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM agent_tool_approvals`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tt := range []struct {
		args    []string
		want    []string // lines in stdout, in order
		wantErr error
		left    int
	}{
		{[]string{"list"}, []string{"SCOPE", "session  conv-a       terminal    agent:main:telegram:dm:42", "user     telegram:42  terminal    -", "user     telegram:42  write_file  -"}, nil, 3},
		{[]string{"list", "--scope", "session"}, []string{"SCOPE", "session  conv-a   terminal  agent:main:telegram:dm:42"}, nil, 3},
		{[]string{"list", "--pattern", "write_file", "--subject", "telegram:42"}, []string{"SCOPE", "user   telegram:42  write_file"}, nil, 3},
		{[]string{"list", "--subject", "telegram:9"}, []string{"No standing approvals."}, nil, 3},
		{[]string{"list", "--scope", "always"}, nil, errUsage, 3},
		{[]string{"list", "now"}, nil, errUsage, 3},
		{[]string{"revoke", "user"}, nil, errUsage, 3},
		{[]string{"revoke", "global", "telegram:42"}, nil, errUsage, 3},
		{[]string{"revoke", "user", "telegram:42", "terminal", "--scope", "user"}, nil, errUsage, 3},
		{[]string{"--pattern", "terminal"}, nil, errUsage, 3}, // a filter without list
		{[]string{"revoke", "user", "telegram:42", "write_file"}, []string{"Revoked user approval of write_file for telegram:42.", "    Every worker asks again from the next such call."}, nil, 2},
		{[]string{"revoke", "user", "telegram:42", "write_file"}, []string{"Nothing revoked: no such standing approval."}, nil, 2},
		{[]string{"revoke", "Session", "conv-a"}, []string{"Revoked session approval of terminal for conv-a.", "    Every worker"}, nil, 1},
	} {
		var out, errOut bytes.Buffer
		err := approvalsCommand(ctx, append(tt.args, "--admin-addr", addr), &out, &errOut)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%v: err %v, want %v (stderr %s)", tt.args, err, tt.wantErr, errOut.String())
		}
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		if tt.want == nil {
			lines = nil
		}
		if len(lines) != len(tt.want) {
			t.Errorf("%v printed:\n%s\nwant %d lines", tt.args, out.String(), len(tt.want))
		} else {
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("%v line %d: %q, want it to begin %q", tt.args, i, lines[i], w)
				}
			}
		}
		if n := left(); n != tt.left {
			t.Errorf("%v: %d approvals left, want %d", tt.args, n, tt.left)
		}
	}
}
