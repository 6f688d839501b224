package admin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// ReloadSkills announces a reload that a process holding skills (a
// Library following the bucket on a connection of its own, as a router
// does) acts on; the answer is the stored announcement, each a new
// revision; it needs the token, and is audited and counted.
func TestReloadSkillsRPC(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	c, authed := serve(t, ctx, Config{}, Deps{DB: db,
		Skills: func(ctx context.Context) (jetstream.KeyValue, error) {
			return skill.OpenBucket(ctx, b.JetStream(), b.Topology())
		}})
	router := bustest.NewWith(t, url, b.Topology())
	rkv, err := skill.OpenBucket(ctx, router.JetStream(), router.Topology())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lib := skill.NewLibrary(skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}, nil, nil)
	if err := lib.Follow(ctx, rkv); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReloadSkills(ctx, &adminv1.ReloadSkillsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, want Unauthenticated", err)
	}
	reloads := testutil.ToFloat64(skillReloads)

	var last uint64
	for _, name := range []string{"deploy", "rollback"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, skill.File), []byte("---\ndescription: "+name+"\n---\nDo it.\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		resp, err := c.ReloadSkills(authed, &adminv1.ReloadSkillsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetRevision() <= last || resp.GetBy() != "admin:ops-jane" ||
			resp.GetAnnouncedAt().AsTime().Before(before.Add(-time.Second)) || resp.GetAnnouncedAt().AsTime().After(time.Now()) {
			t.Errorf("answer %v, want a new revision (after %d) by admin:ops-jane announced now", resp, last)
		}
		last = resp.GetRevision()
		waitFor(t, "the follower to load "+name, func() bool { return lib.Current().Has(name) })
	}
	if n := testutil.ToFloat64(skillReloads) - reloads; n != 2 {
		t.Errorf("counted %v reloads, want 2", n)
	}
	var audited int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'skills.reload' AND actor = 'token:ops-jane'`).Scan(&audited); err != nil || audited != 2 {
		t.Errorf("audited %d reloads (%v), want 2", audited, err)
	}
}
