package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/webhook/internal/hook"
)

// Handler serves POST /webhooks/<route>.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{route}", s.serveWebhook)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if err := s.rn().Ready(r.Context()); err != nil {
			respond(w, http.StatusServiceUnavailable, "unavailable", "")
			return
		}
		respond(w, http.StatusOK, "ok", "")
	})
	return mux
}

func respond(w http.ResponseWriter, code int, status, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	body := map[string]string{"status": status}
	if detail != "" {
		body["detail"] = detail
	}
	_ = json.NewEncoder(w).Encode(body)
}

// refuse answers a refused delivery and counts it; route is "" for an
// unknown route.
func refuse(w http.ResponseWriter, route string, code int, status string) {
	refused.WithLabelValues(route, status).Inc()
	respond(w, code, status, "")
}

// rateLimitedBody is the 429 answer: Hermes's body, with the status the
// gateway's other answers carry.
var rateLimitedBody = []byte(`{"error":"Rate limit exceeded","status":"rate_limited"}` + "\n")

func (s *Service) serveWebhook(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("route")
	route, ok := s.routes[name]
	if !ok {
		refuse(w, "", http.StatusNotFound, "unknown_route")
		return
	}
	body, err := platform.ReadBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.rn().Reject(r.Context(), "webhook body too large", err)
			refuse(w, name, http.StatusRequestEntityTooLarge, "too_large")
			return
		}
		refuse(w, name, http.StatusBadRequest, "unreadable")
		return
	}
	now := s.now()
	if err := hook.Verify(route, r.Header, body, now); err != nil {
		s.rn().Reject(r.Context(), "bad_signature", err)
		refuse(w, name, http.StatusUnauthorized, "bad_signature")
		return
	}
	// Rate limited after the signature, as Hermes: unsigned floods do not
	// spend the route's budget; before parsing and the duplicate check,
	// so a flood costs no JSON decoding and no bus round trip.
	if v := s.limit.allow(name, now); !v.ok {
		s.rateLimited(w, r, name, v)
		return
	}
	ev, rerr := hook.Build(route, s.cfg.Account, r.Header, body)
	if rerr != nil {
		if rerr.Code != http.StatusOK {
			s.rn().Reject(r.Context(), rerr.Status, rerr.Err)
			refused.WithLabelValues(name, rerr.Status).Inc()
		} else {
			s.log.Debug("webhook delivery ignored", "route", name, "reason", rerr.Err.Error())
		}
		respond(w, rerr.Code, rerr.Status, "")
		return
	}
	if hook.HeaderID(route, r.Header) == "" {
		// Deduped by its body: a retry within the route's window is the
		// first delivery, the same body later a new one.
		if err := s.bodies.identify(r.Context(), name, ev, now); err != nil {
			s.log.WarnContext(r.Context(), "webhook body dedupe record failed", "route", name, "err", err)
			respond(w, http.StatusServiceUnavailable, "unavailable", "")
			return
		}
	}
	acc, err := s.rn().Deliver(r.Context(), ev)
	switch {
	case errors.Is(err, platform.ErrRejected):
		refuse(w, name, http.StatusBadRequest, "rejected")
	case err != nil:
		s.log.WarnContext(r.Context(), "publish webhook event failed", "route", name, "err", err)
		respond(w, http.StatusServiceUnavailable, "unavailable", "")
	case acc.Duplicate:
		respond(w, http.StatusOK, "duplicate", "")
	default:
		respond(w, http.StatusAccepted, "accepted", "")
	}
}

// rateLimited answers 429 with Retry-After, counts the refusal and logs
// the first refusal of each window (not every one: a flood would flood
// the log too).
func (s *Service) rateLimited(w http.ResponseWriter, r *http.Request, route string, v verdict) {
	refused.WithLabelValues(route, "rate_limited").Inc()
	if v.log {
		s.log.WarnContext(r.Context(), "webhook route over its rate limit; refusing deliveries until the window frees",
			"route", route, "limit_per_minute", v.limit, "retry_after", v.retryAfter.Round(time.Second), "refused_unlogged_before", v.suppressed)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(v.retryAfter)))
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(rateLimitedBody)
}
