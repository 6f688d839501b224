package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// `switchboard audit` against a real admin API: the entries newest
// first, narrowed, cut at --limit across pages; usage errors.
func TestAuditVerb(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if _, err := db.Exec(ctx, `INSERT INTO audit_log (at, actor, action, target, detail) VALUES
		(now() - interval '10 days', 'token:jane', 'session.reset', 'agent:main:telegram:dm:1', '{"generation": 2}'),
		(now() - interval '2 minutes', 'token:jane', 'users.forget', 'telegram:42', '{"sessions": 1}'),
		(now() - interval '1 minute', 'token:bob', 'users.export', 'telegram:42', '{}')`); err != nil {
		t.Fatal(err)
	}
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db})
	for _, tt := range []struct {
		args    []string
		want    []string // the actions listed, in order
		wantErr error
	}{
		{nil, []string{"users.export", "users.forget", "session.reset"}, nil},
		{[]string{"--action", "users."}, []string{"users.export", "users.forget"}, nil},
		{[]string{"--actor", "token:jane", "--since", "7d"}, []string{"users.forget"}, nil},
		{[]string{"--target", "telegram:42", "--limit", "1"}, []string{"users.export"}, nil},
		{[]string{"--limit", "0"}, nil, errUsage},
		{[]string{"--since", "soon"}, nil, errUsage},
		{[]string{"list"}, nil, errUsage},
	} {
		var out, errOut bytes.Buffer
		err := runAudit(ctx, append(tt.args, "--admin-addr", addr), &out, &errOut)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%q: %v, want %v", tt.args, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		var actions []string
		for _, l := range lines[1:] {
			actions = append(actions, strings.Fields(l)[2])
		}
		if !strings.HasPrefix(lines[0], "AT") || strings.Join(actions, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%q printed:\n%s\nwant the actions %q", tt.args, out.String(), tt.want)
		}
	}
}
