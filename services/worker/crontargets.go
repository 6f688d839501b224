package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// cronCopies are the other deliver targets of a cron run whose job
// names several ("telegram,discord:123,origin"; Hermes's
// _resolve_delivery_targets and _deliver_result, cron/scheduler.py, which
// send the answer to every target once). The scheduler publishes the run
// with the first as its reply route (r.target); the answer's final, its
// failure notice and its media go to the others too, each a copy of the
// reply event with a turn id of its own (copyTurnID), so that delivery
// keys every target's messages apart: a redelivered turn, which
// publishes its final again, sends none twice, and one that stopped
// after the first target's copy still sends the rest. The targets are
// resolved again here, when the answer goes (as Hermes's
// _deliver_result resolves them after the run): a part that does not
// resolve now is skipped, a job removed meanwhile answers in the first
// target only. A job with one target reads nothing here.
type cronCopies struct {
	mu      sync.Mutex
	read    bool
	targets []*deliveryv1.Target
}

// copyTargets are the targets besides r.target that the turn's answer
// goes to (none for every turn but a cron run of a job with several).
// An error (the database) leaves them to be read again.
func (r *turnRun) copyTargets(ctx context.Context) ([]*deliveryv1.Target, error) {
	if r.target == nil || r.req.GetOrigin().GetPlatform() != "cron" || r.s.jobs == nil || r.s.resolveTarget == nil {
		return nil, nil
	}
	c := &r.copies
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read {
		return c.targets, nil
	}
	targets, err := r.readCopyTargets(ctx)
	if err != nil {
		return nil, err
	}
	c.read, c.targets = true, targets
	return targets, nil
}

func (r *turnRun) readCopyTargets(ctx context.Context) ([]*deliveryv1.Target, error) {
	run, ok := cron.RunOfSession(r.req.GetSessionKey())
	if !ok {
		return nil, nil
	}
	id, _, _, err := cron.ParseRunID(run)
	if err != nil {
		return nil, nil //nolint:nilerr // RunOfSession read it
	}
	j, err := r.s.jobs.Get(ctx, id)
	if errors.Is(err, cron.ErrNotFound) {
		r.log.Info("cron run's job is gone; its answer goes to its first deliver target only", "job", id)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the cron job of the run: %w", err)
	}
	if len(cron.DeliverParts(j.Deliver)) < 2 {
		return nil, nil
	}
	targets, skipped, err := cron.Targets(ctx, j, r.s.resolveTarget)
	for _, why := range skipped {
		r.log.Warn("cron run's answer skips a deliver target that does not resolve", "job", id, "target", why)
	}
	r.recordSkipped(ctx, run, skipped)
	if errors.Is(err, outbox.ErrBadTarget) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve the cron job's deliver targets: %w", err)
	}
	first := cron.TargetKey(r.target)
	var out []*deliveryv1.Target
	for _, t := range targets {
		if cron.TargetKey(t) != first {
			out = append(out, t)
		}
	}
	return out, nil
}

// recordSkipped records on the run's job that its answer skips the
// deliver targets skipped ("<part>: <why>", cron.Targets) while it goes
// to the others, as Hermes's _deliver_result keeps sending to the rest
// and records each target it could not deliver to, "; "-joined, as the
// job's last_delivery_error: the owner sees it in /cron list, the
// cronjob tool and /api/jobs (cron.RecordDeliveryFailure; delivery
// records each copy given up the same way, joined to it).
// Best effort, as delivery's record.
func (r *turnRun) recordSkipped(ctx context.Context, run string, skipped []string) {
	if len(skipped) == 0 {
		return
	}
	applied, err := r.s.jobs.RecordDeliveryFailure(ctx, run, "", "not delivered to "+strings.Join(skipped, "; "))
	switch {
	case err != nil:
		r.log.Warn("record a cron run's skipped deliver targets", "run", run, "err", err)
	case !applied:
		r.log.Info("cron run's skipped deliver targets not recorded: the job was removed or has run since", "run", run)
	}
}

// copyTurnID is the turn id of the copy of a reply event of turn for
// target t: the turn's id and a digest of the target (cron.TargetKey),
// the same at every attempt of the turn, so that delivery's idempotency
// keys (<turn id>:<seq>…) and its one final per turn hold per target.
func copyTurnID(turn string, t *deliveryv1.Target) string {
	sum := sha256.Sum256([]byte(cron.TargetKey(t)))
	return turn + "~" + hex.EncodeToString(sum[:8])
}

// publishCopies publishes ev, published as the bus message id to
// r.target, to the turn's other targets (copyTargets), each under the id
// and turn id of its target's copy.
func (r *turnRun) publishCopies(ctx context.Context, subject, id string, ev *repliesv1.ReplyEvent) error {
	targets, err := r.copyTargets(ctx)
	if err != nil || len(targets) == 0 {
		return err
	}
	for _, t := range targets {
		c := proto.Clone(ev).(*repliesv1.ReplyEvent)
		c.TurnId, c.Target = copyTurnID(ev.GetTurnId(), t), t
		if _, err := r.s.bus.Publish(ctx, subject, copyTurnID(id, t), c); err != nil {
			return fmt.Errorf("publish reply event to another deliver target: %w", err)
		}
	}
	return nil
}
