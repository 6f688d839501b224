package delivery

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// share balances the reply partitions across the live delivery replicas.
// Each replica announces itself in a Redis sorted set (scored with when
// its announcement runs out) and owns at most its fair share,
// ceil(partitions / live replicas): a replica that joins takes the
// partitions the others hand back, one at a time, above their new share;
// a replica that leaves (or dies, once its announcement runs out) leaves
// its partitions to the others when their leases expire.
type share struct {
	rdb        *redis.Client
	key        string
	owner      string
	ttl        time.Duration
	partitions int64
	live       atomic.Int64 // replicas announced, this one included
	owned      atomic.Int64 // partitions this replica owns
}

func newShare(rdb *redis.Client, key, owner string, ttl time.Duration, partitions int) *share {
	sh := &share{rdb: rdb, key: key, owner: owner, ttl: ttl, partitions: int64(partitions)}
	sh.live.Store(1)
	return sh
}

// announce renews this replica's entry, forgets replicas whose entries ran
// out and counts the rest. On error the last count stands.
func (sh *share) announce(ctx context.Context) error {
	now := time.Now()
	pipe := sh.rdb.TxPipeline()
	pipe.ZAdd(ctx, sh.key, redis.Z{Score: float64(now.Add(sh.ttl).UnixMilli()), Member: sh.owner})
	pipe.ZRemRangeByScore(ctx, sh.key, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
	card := pipe.ZCard(ctx, sh.key)
	pipe.PExpire(ctx, sh.key, 2*sh.ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	sh.live.Store(max(1, card.Val()))
	return nil
}

// leave removes this replica's entry, so the others take its share now.
func (sh *share) leave(ctx context.Context) error {
	return sh.rdb.ZRem(ctx, sh.key, sh.owner).Err()
}

// fair is how many partitions this replica may own.
func (sh *share) fair() int64 {
	n := sh.live.Load()
	return (sh.partitions + n - 1) / n
}

// mayTake reports whether this replica may try for one more partition.
func (sh *share) mayTake() bool { return sh.owned.Load() < sh.fair() }

func (sh *share) took() { partitionsOwned.Set(float64(sh.owned.Add(1))) }

func (sh *share) left() { partitionsOwned.Set(float64(sh.owned.Add(-1))) }

// yield reports, for one owned partition at a time, that this replica is
// above its fair share and the partition should be handed back; the
// partition counts as left from then on.
func (sh *share) yield() bool {
	for {
		o := sh.owned.Load()
		if o <= sh.fair() {
			return false
		}
		if sh.owned.CompareAndSwap(o, o-1) {
			partitionsOwned.Set(float64(o - 1))
			return true
		}
	}
}
