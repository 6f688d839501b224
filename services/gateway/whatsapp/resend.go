package whatsapp

import (
	"context"
	"errors"
	"strconv"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// A send can end without knowing whether WhatsApp took the message: the
// Graph API call timed out, the connection broke, or Meta answered 5xx
// or a transient code (1, 2, 131000 "Something went wrong") after it
// may have queued the message. The Cloud API takes no idempotency key
// and has no way to list the messages a business sent, so a plain retry
// posted the message again. What it has is biz_opaque_callback_data: a
// string the send gives, which Meta returns in that message's sent,
// delivered and read statuses (the webhook the gateway serves). Each
// message of a send carries its tag (platform.SendTag); a status that
// brings one back is recorded beside the send's receipt
// (platform.SendReporter), seen by every replica; and the retry of an
// attempt that ended unanswered first looks for it: reported, the
// message went out under the reported wamid and is not posted again;
// not yet reported, the retry waits for the report up to reportWait
// after that attempt; then it posts again (the attempt did not reach
// WhatsApp, or its statuses do not come: the webhook's `messages` field
// is not subscribed).

const (
	// noPart: a message outside a send's records (a reaction).
	noPart = -1
	// defaultReportWait is how long after an unanswered attempt a retry
	// waits for WhatsApp's sent status of it; Meta reports a message
	// it took within seconds. A transient error that sent nothing delays
	// the message by as much, and spends up to four of delivery's
	// attempts (max_attempts, 12 by default) on the wait.
	defaultReportWait = 20 * time.Second
	// reportRetry is how soon delivery asks again while waiting.
	reportRetry = 5 * time.Second
)

func unsureMark(part int) string { return "wa-unsure" + strconv.Itoa(part) }

// unanswered reports a failure after which WhatsApp may have taken the
// message: a network failure or timeout, or a retryable answer (5xx,
// Meta's transient codes). A rate limit or a refusal is a SendError:
// WhatsApp did not take that message.
func unanswered(err error) bool {
	var se *platform.SendError
	return err != nil && !errors.As(err, &se)
}

// markUnsure records when the latest unanswered attempt of part ended:
// the wait for a report starts again with each (a repost after the wait
// whose answer is lost too may have gone out as well), where the first
// attempt's time would let every retry after the first wait post at once.
func (p *Platform) markUnsure(ctx context.Context, part int) {
	platform.SetSendMark(ctx, unsureMark(part), strconv.FormatInt(time.Now().UnixMilli(), 10))
}

// reported returns, for a part an earlier attempt left unsure, the wamid
// WhatsApp reported for it, or an error telling delivery to ask again
// while the report may still come; "" and nil: post the message.
func (p *Platform) reported(ctx context.Context, part int) (string, error) {
	v, unsure := platform.SendMarked(ctx, unsureMark(part))
	if !unsure {
		return "", nil
	}
	if id, ok := platform.SentReport(ctx, part); ok {
		p.log.Info("whatsapp reported an earlier attempt of this message sent; not sent again", "message_id", pseudonym.Personal(id))
		return id, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return "", nil
	}
	if wait := time.Until(time.UnixMilli(ms).Add(p.reportWait())); wait > 0 {
		return "", &platform.SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, RetryAfter: min(wait, reportRetry),
			Err: errors.New("waiting for whatsapp's status of an earlier attempt of this message, which ended without an answer")}
	}
	p.log.Info("no whatsapp status of an earlier attempt of this message; sending it again")
	return "", nil
}

// reportSent records a status that says a message the gateway tagged
// went out.
func reportSent(ctx context.Context, conn platform.Deliverer, s status) {
	r, ok := conn.(platform.SendReporter)
	if !ok || s.CallbackData == "" {
		return
	}
	switch s.Status {
	case "sent", "delivered", "read":
		r.ReportSent(ctx, s.CallbackData, s.ID)
	}
}

func (p *Platform) reportWait() time.Duration {
	if p.cfg.reportWait > 0 {
		return p.cfg.reportWait
	}
	return defaultReportWait
}
