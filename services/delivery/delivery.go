// Package delivery turns reply events into platform messages: it renders
// them (chunks, streaming by edit, typing), records every message in the
// Postgres outbox, and sends due rows through the platform gateways with
// retries classified by error, shared rate limits and an expiry.
package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/services/delivery/internal/ratelimit"
)

// Deps are the clients the service uses.
type Deps struct {
	Log   *slog.Logger
	Bus   *bus.Bus
	DB    *pgxpool.Pool
	Redis *redis.Client
	// RedisPrefix namespaces Redis keys (redis.prefix).
	RedisPrefix string
	// Now is the clock; time.Now when nil. Tests inject a fake one.
	Now func() time.Time
}

// Service is one delivery replica.
type Service struct {
	cfg     Config
	log     *slog.Logger
	bus     *bus.Bus
	db      *pgxpool.Pool
	store   *outbox.Store
	limiter *ratelimit.Limiter
	locker  *redisx.Locker
	now     func() time.Time
	owner   string
	share   *share

	kickCh chan struct{}
	// expiry is when the send loop next looks for rows to expire.
	expiry expiryClock
	// due is when the rows this replica queued again come due.
	due    dueClock
	turns  *turns
	tools  *toolTurns
	media  *mediaTurns
	typing *typing

	mu       sync.Mutex
	grpcAddr net.Addr
	ready    chan struct{}
}

// New builds a replica.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Bus == nil || deps.DB == nil || deps.Redis == nil {
		return nil, errors.New("delivery: bus, database and redis are required")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	owner := cfg.ReplicaID
	if owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		owner = host + "-" + hex.EncodeToString(b)
	}
	s := &Service{
		cfg:     cfg,
		log:     deps.Log.With("service", "delivery"),
		bus:     deps.Bus,
		db:      deps.DB,
		store:   outbox.New(deps.DB),
		limiter: ratelimit.New(deps.Redis, deps.RedisPrefix+"delivery:"),
		locker:  redisx.NewLocker(deps.Redis, deps.RedisPrefix+"delivery:"),
		now:     deps.Now,
		owner:   owner,
		// Announcements run out in half a partition lease: a dead replica
		// stops counting before its partitions' leases expire, so the others'
		// share has grown by the time they can take them.
		share:  newShare(deps.Redis, deps.RedisPrefix+"delivery:replicas", owner, cfg.PartitionLease/2, deps.Bus.Topology().PartitionCount()),
		kickCh: make(chan struct{}, 1),
		turns:  newTurns(),
		tools:  newToolTurns(),
		media:  newMediaTurns(),
		ready:  make(chan struct{}),
	}
	s.typing = newTyping(s)
	return s, nil
}

// Store is the outbox this replica uses (for the admin adapter and
// gateways' channel directory).
func (s *Service) Store() *outbox.Store { return s.store }

// GRPCAddr is the address DeliveryService listens on, once Run started it.
func (s *Service) GRPCAddr() net.Addr {
	<-s.ready
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grpcAddr
}

// Run consumes reply events of the partitions this replica owns, sends due
// outbox rows and serves DeliveryService until ctx ends, then stops: the
// consumers hand back unfinished events, in-flight sends finish.
func (s *Service) Run(ctx context.Context) error {
	var srv *grpc.Server
	var lis net.Listener
	if s.cfg.GRPCAddr != "" {
		var err error
		lis, err = net.Listen("tcp", s.cfg.GRPCAddr)
		if err != nil {
			close(s.ready)
			return fmt.Errorf("listen %s: %w", s.cfg.GRPCAddr, err)
		}
		srv = grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()), grpc.ChainUnaryInterceptor(panics.UnaryServerInterceptor(s.log, "delivery_rpc")))
		deliveryv1.RegisterDeliveryServiceServer(srv, &sendServer{s: s})
		s.mu.Lock()
		s.grpcAddr = lis.Addr()
		s.mu.Unlock()
	}
	close(s.ready)
	s.log.Info("delivery started", "replica", s.owner, "grpc", s.cfg.GRPCAddr)

	if err := s.share.announce(ctx); err != nil {
		s.log.Warn("announce delivery replica failed", "err", err)
	}
	// Before the first send, until the last ended (gone.go).
	alive, err := s.serveAlive()
	if err != nil {
		if lis != nil {
			_ = lis.Close()
		}
		return err
	}
	defer func() { _ = alive.Unsubscribe() }()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.announceLoop(gctx) })
	g.Go(func() error { return s.takeOverGone(gctx) })
	for p := range s.bus.Topology().PartitionCount() {
		g.Go(func() error { return s.ownPartition(gctx, p) })
	}
	g.Go(func() error { return s.sendLoop(gctx) })
	g.Go(func() error { return s.housekeeping(gctx) })
	if srv != nil {
		g.Go(func() error { return srv.Serve(lis) })
		g.Go(func() error {
			<-gctx.Done()
			stopped := make(chan struct{})
			go func() { srv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				srv.Stop()
			}
			return nil
		})
	}
	err = g.Wait()
	s.typing.stopAll()
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) && ctx.Err() == nil {
		return err
	}
	s.log.Info("delivery stopped")
	return nil
}

// announceLoop keeps this replica counted among the live ones until ctx
// ends, then takes it out at once.
func (s *Service) announceLoop(ctx context.Context) error {
	t := time.NewTicker(s.cfg.PartitionLease / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := s.share.leave(lctx); err != nil {
				s.log.Debug("leave delivery replicas", "err", err)
			}
			return nil
		case <-t.C:
			if err := s.share.announce(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("announce delivery replica failed", "err", err)
			}
		}
	}
}

// Partitions is how many reply partitions this replica owns now.
func (s *Service) Partitions() int { return int(s.share.owned.Load()) }

// ownPartition runs the consumer of reply partition p while this replica
// holds the partition's lease in Redis. Streaming state lives in memory,
// so all events of a session must reach one replica: each partition has
// one owner at a time, and a dead owner's lease expires. A replica owns
// at most its fair share of the partitions (share) and hands back what is
// above it when replicas join.
func (s *Service) ownPartition(ctx context.Context, p int) error {
	name := fmt.Sprintf("replies-partition:%d", p)
	token := redisx.NewToken()
	retry := s.cfg.PartitionLease / 3
	for ctx.Err() == nil {
		if !s.share.mayTake() {
			select {
			case <-ctx.Done():
			case <-time.After(jitter(retry)):
			}
			continue
		}
		ok, err := s.locker.Acquire(ctx, name, token, s.cfg.PartitionLease)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("acquire reply partition failed", "partition", p, "err", err)
		}
		if !ok {
			select {
			case <-ctx.Done():
			case <-time.After(jitter(retry)):
			}
			continue
		}
		s.share.took()
		s.log.Debug("reply partition owned", "partition", p)
		pctx, cancel := context.WithCancel(ctx)
		var yielded atomic.Bool
		go func() {
			defer cancel()
			t := time.NewTicker(retry)
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					if s.share.yield() {
						yielded.Store(true)
						s.log.Info("reply partition handed back to balance the replicas", "partition", p)
						return
					}
					if err := s.locker.Renew(pctx, name, token, s.cfg.PartitionLease); err != nil {
						if pctx.Err() == nil {
							s.log.Warn("reply partition lost", "partition", p, "err", err)
						}
						return
					}
				}
			}
		}()
		err = s.consumer(p).Run(pctx)
		cancel()
		// Before p can be owned again: another replica may stream its
		// turns meanwhile.
		s.tools.lostPartition(p)
		s.turns.lostPartition(p)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = s.locker.Release(rctx, name, token)
		rcancel()
		if !yielded.Load() {
			s.share.left()
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("reply consumer stopped", "partition", p, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(jitter(retry)):
			}
		}
	}
	return nil
}

func (s *Service) consumer(p int) *bus.Consumer[repliesv1.ReplyEvent, *repliesv1.ReplyEvent] {
	return bus.NewConsumer(s.bus, bus.ConsumerSpec{
		Stream:         bus.StreamReplies,
		Durable:        fmt.Sprintf("delivery-replies-%d", p),
		FilterSubjects: []string{fmt.Sprintf("%s.%d", bus.SubjectReplies, p)},
		AckWait:        s.cfg.AckWait,
		MaxAckPending:  1, // strict order within the partition
		MaxDeliver:     20,
		Backoff:        []time.Duration{200 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second},
		Concurrency:    1,
		DrainTimeout:   5 * time.Second,
		PollWait:       s.cfg.PollWait,
		Unavailable:    pg.IsUnavailable,
	}, func(ctx context.Context, ev *repliesv1.ReplyEvent) error { return s.handle(ctx, p, ev) })
}

// doneKeep is how long a turn whose final was sent stays known: longer
// than its events' redelivery (the worker's attempts, the consumer's
// backoff), far shorter than a streamed message's editable life.
const doneKeep = 15 * time.Minute

// housekeeping forgets finished turns and old stream records, deletes
// outbox rows past their retention, and keeps the outbox gauge current.
func (s *Service) housekeeping(ctx context.Context) error {
	prune := time.NewTicker(pruneInterval)
	defer prune.Stop()
	count := time.NewTicker(outboxCountInterval)
	defer count.Stop()
	s.countOutbox(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-count.C:
			s.countOutbox(ctx)
		case <-prune.C:
			// A panic in a prune is recovered and counted; what it did not
			// prune is pruned next time.
			_ = panics.Recover(s.log, "delivery_housekeeping", func() error {
				now := time.Now()
				s.turns.prune(now.Add(-2*s.cfg.TTL), now.Add(-doneKeep))
				s.tools.prune(now.Add(-2 * s.cfg.TTL))
				s.media.prune(now.Add(-2 * s.cfg.TTL))
				s.typing.prunePaused(now.Add(-2 * s.cfg.TTL))
				if err := s.store.PruneStreamMessages(ctx, now.Add(-2*s.cfg.TTL)); err != nil && ctx.Err() == nil {
					s.log.Warn("prune stream messages failed", "err", err)
				}
				if err := s.store.PruneFinals(ctx, now.Add(-finalsKeep)); err != nil && ctx.Err() == nil {
					s.log.Warn("prune turn finals failed", "err", err)
				}
				s.pruneOutbox(ctx, s.now())
				return nil
			})
		}
	}
}

// How often housekeeping reads the outbox gauge and prunes (variables
// for tests).
var (
	outboxCountInterval = 15 * time.Second
	pruneInterval       = time.Minute
)

// countOutbox sets switchboard_delivery_outbox_rows. Every replica reads
// the same table: the gauge is the outbox's, not the replica's.
func (s *Service) countOutbox(ctx context.Context) {
	counts, err := s.store.Counts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("count outbox rows failed", "err", err)
		}
		return
	}
	for st, n := range counts {
		outboxRows.WithLabelValues(string(st)).Set(float64(n))
	}
}

// pruneBatch bounds one delete, so that pruning a large backlog (the first
// run after an upgrade) never holds many row locks at once.
const pruneBatch = 1000

// pruneBatches bounds the batches of one housekeeping tick: a backlog
// (the first run after an upgrade) drains over several minutes instead of
// holding up the outbox gauge.
const pruneBatches = 20

// pruneOutbox deletes sent rows older than SentRetention and dead letters
// older than DeadRetention, a batch at a time.
func (s *Service) pruneOutbox(ctx context.Context, now time.Time) {
	total := 0
	for range pruneBatches {
		if ctx.Err() != nil {
			break
		}
		n, err := s.store.Prune(ctx, now.Add(-s.cfg.SentRetention), now.Add(-s.cfg.DeadRetention), pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("prune outbox failed", "err", err)
			}
			break
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("pruned outbox rows past their retention", "rows", total)
	}
}

// kick wakes the send loop.
func (s *Service) kick() {
	select {
	case s.kickCh <- struct{}{}:
	default:
	}
}

func jitter(d time.Duration) time.Duration {
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	return d/2 + time.Duration(float64(d)*float64(b[0])/255/2)
}
