package teams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// serve serves the messaging endpoint (and GET /health, as Hermes) until
// ctx ends.
func (p *Platform) serve(ctx context.Context, conn platform.Conn) error {
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.Handler(conn))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	err := platform.ServeWebhook(ctx, conn, p.log, p.Name(), p.cfg.Addr, mux, p.cfg.AckTimeout, func(addr string) {
		p.addr.Store(addr)
		p.log.Info("teams messaging endpoint listening", "addr", addr, "path", p.cfg.Path)
	})
	if err != nil {
		return fmt.Errorf("teams: %w", err)
	}
	return nil
}

// Handler serves the Bot Framework's POSTs of activities. An activity is
// answered 413 over MaxBodyBytes, 401 without a valid Bot Framework
// token (or when the token's serviceurl is not the activity's), 503 when
// the token cannot be checked (the signing keys could not be downloaded), 400 when
// it is not an activity, 500 when its message could not be stored (the
// Bot Framework retries; a retry is not published twice) and 200 once
// its message is on the bus or deliberately skipped.
func (p *Platform) Handler(conn platform.Deliverer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p.activity(w, r, conn)
	})
}

func (p *Platform) activity(w http.ResponseWriter, r *http.Request, conn platform.Deliverer) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			conn.Reject(r.Context(), "teams activity too large", err)
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		p.refuse(w, r, "no authorization header")
		return
	}
	// The token first: who sent it decides whether the body is worth
	// an answer.
	tok, err := p.verifier.verify(r.Context(), auth)
	if errors.Is(err, errKeysUnavailable) {
		// Not a forged token: one that cannot be checked now. The Bot
		// Framework retries a 5xx.
		p.log.Warn("teams activity not checked; the bot framework will retry", "err", err)
		w.Header().Set("Retry-After", "60")
		http.Error(w, "signing keys unavailable", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		p.refuse(w, r, err.Error())
		return
	}
	a, err := parseActivity(body)
	if err != nil {
		conn.Reject(r.Context(), "malformed teams activity", err)
		http.Error(w, "malformed activity", http.StatusBadRequest)
		return
	}
	switch {
	case !sameServiceURL(tok.serviceURL, a.ServiceURL):
		p.refuse(w, r, "the token's serviceurl is not the activity's")
		return
	case !tok.endorses(a.ChannelID):
		p.refuse(w, r, "the signing key does not endorse the activity's channel")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AckTimeout)
	defer cancel()
	press, inv, alone, err := p.handle(ctx, conn, a)
	defer p.releaseInvoke(inv)
	if err != nil {
		p.log.Warn("teams activity not stored; the bot framework will retry", "err", err)
		http.Error(w, "not stored", http.StatusInternalServerError)
		return
	}
	if a.Type == "invoke" && (press || a.Name == cardActionInvoke) {
		// An invoke is answered in the HTTP response (an Adaptive Card
		// action response); Teams shows an error without one. A press
		// waits for the router's answer (Config.PressHold); a card
		// action the gateway cannot read gets Hermes's word at once.
		text := unknownAction
		if press {
			text = p.awaitAnswer(r.Context(), inv, alone)
			// Whether this answer reaches the Bot Framework is not
			// known here (it may have given up waiting, and retries):
			// the router's word, come or to come, is kept for a retry.
			p.keepForRetry(inv)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(invokeResponse(text))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// maxPressHold bounds Config.PressHold, how long the answer to an
// approval button's invoke waits for the router's answer (its refusal of
// a presser it does not authorize, Hermes's "⛔ Not authorized.", or its
// word once it has decided the press): the Bot Framework wants the
// invoke's answer within a few seconds.
const maxPressHold = 5 * time.Second

func (p *Platform) refuse(w http.ResponseWriter, r *http.Request, why string) {
	authFailures.Inc()
	p.log.Warn("teams activity refused", "reason", why, "remote", r.RemoteAddr)
	http.Error(w, "unauthorized", http.StatusUnauthorized)
}

// handle keeps the conversation's serviceUrl, then publishes the
// activity's message (or approval button press: press is true), if it is
// one to answer. An invoke's press is published with its interaction and
// held for the router's answer (inv, nil when it is not held), also when
// the bus has it already: a retried invoke's press may not be decided
// yet (invokes.go); alone when it was decided long ago, and no holder
// has the router's word to give (answerAlone).
func (p *Platform) handle(ctx context.Context, conn platform.Deliverer, a *Activity) (press bool, inv *heldInvoke, alone bool, err error) {
	if err := p.remember(ctx, a.Conversation.ID, a.ServiceURL); err != nil {
		return false, nil, false, err
	}
	n := normalize(a, p.cfg.ClientID, p.cfg.RequireMention)
	if n.skip == "not_mentioned" && validID(a.ReplyToID) {
		// A reply to one of the bot's own messages addresses it, as in
		// Hermes.
		mine, err := p.sentByBot(ctx, a.Conversation.ID, a.ReplyToID)
		if err != nil {
			return false, nil, false, err
		}
		if mine {
			n = normalize(a, p.cfg.ClientID, false)
		}
	}
	if n.ev == nil {
		skipped.WithLabelValues(n.skip).Inc()
		p.log.Debug("teams activity skipped", "reason", n.skip, "type", a.Type)
		return false, nil, false, nil
	}
	created := false
	if h, ok := conn.(platform.PressHolder); ok && n.press && a.Type == "invoke" {
		// The router's answer may come as soon as the press is out.
		id := interactionID(p.cfg.ClientID, n.ev.GetEventId())
		if inv, created = p.holdInvoke(h, id); inv.hold != nil {
			n.ev.Interaction = &eventsv1.Interaction{Id: id, Component: true, ExpiresAt: timestamppb.New(time.Now().Add(p.cfg.PressHold)),
				UnknownChoice: n.unknown}
		}
	}
	if n.unknown && n.ev.GetInteraction() == nil {
		// Not held, the router's word could not reach the invoke: the
		// gateway answers it, Hermes's word for anyone authorized.
		p.releaseInvoke(inv)
		return false, nil, false, nil
	}
	acc, err := conn.Deliver(ctx, n.ev)
	if !acc.Duplicate && !errors.Is(err, platform.ErrRejected) {
		p.markPublished(ctx, inv)
	}
	if err != nil && !errors.Is(err, platform.ErrRejected) {
		p.keepForRetry(inv)
		p.releaseInvoke(inv)
		return false, nil, false, fmt.Errorf("publish message %s: %w", n.ev.GetEventId(), err)
	}
	if err != nil {
		// Not published: nothing will answer it.
		p.releaseInvoke(inv)
		inv = nil
	}
	if acc.Duplicate {
		if alone = p.answerAlone(ctx, inv, created); !alone {
			p.askElsewhere(inv)
		}
	}
	return n.press, inv, alone, nil
}
