package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// While Redis does not answer (a restart, a failover: the very outages
// that lose the lock) the running turn keeps renewing its lease in
// Postgres, so that a message arriving once Redis is back, empty, before
// the turn's next renewal claims the lock again, still finds the turn
// running (migration 00148). Before, the lease was renewed only with a
// lock renewal that succeeded: an outage longer than the lock's TTL let
// it expire, and that message started a second turn beside the first.
func TestLeaseRenewedWhileRedisDoesNotAnswer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	locker := redisx.NewLocker(rdb, prefix)
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation)
		VALUES ('s1', 'sid-s1', 'telegram', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
		VALUES ('s1', 't1', 1, now() + $1::bigint * interval '1 millisecond')`, ttl.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	token := redisx.NewToken()
	r := &turnRun{s: &Service{locker: locker, store: store.New(db), rdb: rdb}, log: slog.New(slog.DiscardHandler),
		req: &turnsv1.TurnRequested{SessionKey: "s1", TurnId: "t1", LockToken: token},
		st:  store.Turn{SessionKey: "s1", SessionID: "sid-s1", TurnID: "t1", Generation: 1},
		ttl: ttl, holder: token + "/1", ctl: newControl(nil)}
	rdb.AddHook(&redisDown{lock: locker.Key("s1"), first: func() {}})
	_, stop := r.keepLock(ctx)
	time.Sleep(3 * ttl)
	var holds bool
	if err := db.QueryRow(ctx, `SELECT expires_at > now() FROM turn_leases WHERE session_key = 's1'`).Scan(&holds); err != nil {
		t.Fatal(err)
	}
	stop()
	if !holds {
		t.Fatal("the lease of a running turn expired while Redis did not answer its renewals")
	}
}
