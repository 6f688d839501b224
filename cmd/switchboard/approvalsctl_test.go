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
