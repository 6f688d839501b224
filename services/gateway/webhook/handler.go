package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
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

func (s *Service) serveWebhook(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("route")
	route, ok := s.routes[name]
	if !ok {
		respond(w, http.StatusNotFound, "unknown_route", "")
		return
	}
	body, err := platform.ReadBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.rn().Reject(r.Context(), "webhook body too large", err)
			respond(w, http.StatusRequestEntityTooLarge, "too_large", "")
			return
		}
		respond(w, http.StatusBadRequest, "unreadable", "")
		return
	}
	ev, rerr := hook.Prepare(route, s.cfg.Account, r.Header, body, time.Now())
	if rerr != nil {
		if rerr.Code != http.StatusOK {
			s.rn().Reject(r.Context(), rerr.Status, rerr.Err)
		} else {
			s.log.Debug("webhook delivery ignored", "route", name, "reason", rerr.Err.Error())
		}
		respond(w, rerr.Code, rerr.Status, "")
		return
	}
	acc, err := s.rn().Deliver(r.Context(), ev)
	switch {
	case errors.Is(err, platform.ErrRejected):
		respond(w, http.StatusBadRequest, "rejected", "")
	case err != nil:
		s.log.WarnContext(r.Context(), "publish webhook event failed", "route", name, "err", err)
		respond(w, http.StatusServiceUnavailable, "unavailable", "")
	case acc.Duplicate:
		respond(w, http.StatusOK, "duplicate", "")
	default:
		respond(w, http.StatusAccepted, "accepted", "")
	}
}
