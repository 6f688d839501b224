package redisx_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

func TestLock(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	l := redisx.NewLocker(rdb, prefix)
	ctx := context.Background()
	a, b := redisx.NewToken(), redisx.NewToken()

	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"a acquires", func() error { return must(l.Acquire(ctx, "s", a, time.Minute)) }, nil},
		{"b cannot acquire", func() error { return mustNot(l.Acquire(ctx, "s", b, time.Minute)) }, nil},
		{"b cannot renew", func() error { return l.Renew(ctx, "s", b, time.Minute) }, redisx.ErrNotOwner},
		{"b cannot release", func() error { return l.Release(ctx, "s", b) }, redisx.ErrNotOwner},
		{"a renews", func() error { return l.Renew(ctx, "s", a, time.Minute) }, nil},
		{"a releases", func() error { return l.Release(ctx, "s", a) }, nil},
		{"a release again", func() error { return l.Release(ctx, "s", a) }, redisx.ErrNotOwner},
		{"b acquires freed lock", func() error { return must(l.Acquire(ctx, "s", b, time.Minute)) }, nil},
	}
	for _, s := range steps {
		if err := s.do(); !errors.Is(err, s.want) {
			t.Fatalf("%s: err = %v, want %v", s.name, err, s.want)
		}
	}
	owner, err := l.Owner(ctx, "s")
	if err != nil || owner != b {
		t.Fatalf("owner = %q, %v; want b", owner, err)
	}
}

func TestExpiredLockCanBeTakenAndOldOwnerIsFenced(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	l := redisx.NewLocker(rdb, prefix)
	ctx := context.Background()
	old, next := redisx.NewToken(), redisx.NewToken()
	if err := must(l.Acquire(ctx, "s", old, 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for {
		ok, err := l.Acquire(ctx, "s", next, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Release(ctx, "s", old); !errors.Is(err, redisx.ErrNotOwner) {
		t.Fatalf("stale owner release: %v", err)
	}
	if owner, _ := l.Owner(ctx, "s"); owner != next {
		t.Fatal("stale owner's release removed the new owner's lock")
	}
}

func TestLockIsExclusiveUnderContention(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	l := redisx.NewLocker(rdb, prefix)
	var winners atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := l.Acquire(context.Background(), "hot", redisx.NewToken(), time.Minute)
			if err != nil {
				t.Error(err)
			}
			if ok {
				winners.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := winners.Load(); n != 1 {
		t.Fatalf("%d owners, want 1", n)
	}
}

func must(ok bool, err error) error {
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("not acquired")
	}
	return nil
}

func mustNot(ok bool, err error) error {
	if err != nil {
		return err
	}
	if ok {
		return errors.New("acquired a held lock")
	}
	return nil
}

func TestClaimGivesAGrantToOneHolderAtATime(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	l := redisx.NewLocker(rdb, prefix)
	ctx := context.Background()
	grant, other := redisx.NewToken(), redisx.NewToken()
	first, second := redisx.Holder(grant, "w1.1"), redisx.Holder(grant, "w2.2")
	claim := func(token, holder string, ttl time.Duration) func() (redisx.Claim, error) {
		return func() (redisx.Claim, error) { return l.Claim(ctx, "s", token, holder, ttl) }
	}
	steps := []struct {
		name string
		do   func() (redisx.Claim, error)
		want redisx.Claim
	}{
		{"nobody holds it: an attempt claims a free lock", claim(grant, first, time.Minute), redisx.ClaimedFree},
		{"the same attempt claims again (renews)", claim(grant, first, time.Minute), redisx.Claimed},
		{"a second attempt of the grant is busy", claim(grant, second, time.Minute), redisx.ClaimBusy},
		{"another grant has lost", claim(other, redisx.Holder(other, "w3.1"), time.Minute), redisx.ClaimLost},
		{"handed back to the bare grant", func() (redisx.Claim, error) {
			return redisx.Claimed, l.Swap(ctx, "s", first, grant, time.Minute)
		}, redisx.Claimed},
		{"the second attempt claims the handed-back grant", claim(grant, second, 50*time.Millisecond), redisx.Claimed},
		{"the first attempt is now busy", claim(grant, first, time.Minute), redisx.ClaimBusy},
		{"after the TTL the first attempt claims again", func() (redisx.Claim, error) {
			time.Sleep(120 * time.Millisecond)
			return l.Claim(ctx, "s", grant, first, time.Minute)
		}, redisx.ClaimedFree},
	}
	for _, s := range steps {
		got, err := s.do()
		if err != nil || got != s.want {
			t.Fatalf("%s: got %v, %v; want %v", s.name, got, err, s.want)
		}
	}
	if err := l.Swap(ctx, "s", second, grant, time.Minute); !errors.Is(err, redisx.ErrNotOwner) {
		t.Fatalf("a holder that lost the lock swapped it: %v", err)
	}
	if owner, _ := l.Owner(ctx, "s"); owner != first || redisx.GrantOf(owner) != grant {
		t.Fatalf("owner %q, want %q of grant %q", owner, first, grant)
	}
}

// The waiting mark: a start that finds the lock held leaves a mark its
// holder learns of on letting go, exactly once; a lock that was free is
// taken instead, leaving no mark.
func TestWaitingMarkReachesTheHolderThatLetsGo(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	l := redisx.NewLocker(rdb, prefix)
	ctx := context.Background()
	a, b := redisx.NewToken(), redisx.NewToken()
	acquire := func(token string) func() (bool, error) {
		return func() (bool, error) { return l.AcquireOrMark(ctx, "s", token, time.Minute) }
	}
	acquireInPipeline := func(token string) func() (bool, error) {
		return func() (bool, error) {
			pipe := rdb.Pipeline()
			cmd := l.AcquireOrMarkIn(ctx, pipe, "s", token, time.Minute)
			if _, err := pipe.Exec(ctx); err != nil {
				return false, err
			}
			n, err := cmd.Int()
			return n == 1, err
		}
	}
	release := func(token string) func() (bool, error) {
		return func() (bool, error) { return l.ReleaseWaiting(ctx, "s", token) }
	}
	steps := []struct {
		name    string
		do      func() (bool, error)
		want    bool
		wantErr error
	}{
		{"a takes the free lock", acquire(a), true, nil},
		{"a lets go: nothing waited", release(a), false, nil},
		{"a takes it again", acquire(a), true, nil},
		{"b finds it held: marks it", acquire(b), false, nil},
		{"b cannot release a's lock", release(b), false, redisx.ErrNotOwner},
		{"a lets go: something waits", release(a), true, nil},
		{"b takes it in a pipeline", acquireInPipeline(b), true, nil},
		{"the mark went to a alone", release(b), false, nil},
		{"a takes it once more", acquire(a), true, nil},
		{"b marks it in a pipeline", acquireInPipeline(b), false, nil},
		{"a released with plain Release keeps the mark", func() (bool, error) { return true, l.Release(ctx, "s", a) }, true, nil},
		{"b takes the free lock", acquire(b), true, nil},
		{"marked by hand", func() (bool, error) { return true, l.MarkWaiting(ctx, "s") }, true, nil},
		{"b lets go: the marks wait for it", release(b), true, nil},
		{"released twice", release(b), false, redisx.ErrNotOwner},
	}
	for _, s := range steps {
		got, err := s.do()
		if !errors.Is(err, s.wantErr) || (err == nil && got != s.want) {
			t.Fatalf("%s: got %v, %v; want %v, %v", s.name, got, err, s.want, s.wantErr)
		}
	}
}

func TestGrantTime(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1796180000123)
	grant := redisx.NewGrant(now)
	tests := []struct {
		token string
		want  time.Time
		ok    bool
	}{
		{grant, now, true},
		{redisx.Holder(grant, "w1.1"), time.Time{}, false},
		{redisx.NewToken(), time.Time{}, false},
		{"held-by-test", time.Time{}, false},
		{"gzz." + redisx.NewToken(), time.Time{}, false},
		{"g1a.short", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, tt := range tests {
		at, ok := redisx.GrantTime(tt.token)
		if ok != tt.ok || !at.Equal(tt.want) {
			t.Errorf("GrantTime(%q) = %v, %v; want %v, %v", tt.token, at, ok, tt.want, tt.ok)
		}
	}
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer refused.Close()
	_, dialErr := refused.Get(context.Background(), "k").Result()
	rdb, _ := redistest.New(t)
	_, wrongType := rdb.Eval(context.Background(), `return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value")`, nil).Result()
	_, loading := rdb.Eval(context.Background(), `return redis.error_reply("LOADING Redis is loading the dataset in memory")`, nil).Result()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", dialErr, true},
		{"wrapped", fmt.Errorf("claim lock s: %w", dialErr), true},
		{"loading after a restart", loading, true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"refused command", wrongType, false},
		{"no such key", redis.Nil, false},
		{"canceled", context.Canceled, false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
	}
	for _, tt := range tests {
		if got := redisx.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("%s (%v): IsUnavailable = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
