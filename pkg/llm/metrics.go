package llm

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_llm_requests_total",
		Help: "Model calls (each attempt of a retried call), by provider, model and result: ok, an error class (rate_limited, server, quota, auth, context_overflow, bad_request), timeout, canceled or error.",
	}, []string{"provider", "model", "result"})
	requestSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_llm_request_seconds",
		Help:    "Duration of model calls (each attempt), by provider and model.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
	}, []string{"provider", "model"})
	firstToken = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_llm_time_to_first_token_seconds",
		Help:    "Time from a streamed model call's start to its first delta, by provider and model.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"provider", "model"})
	tokens = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_llm_tokens_total",
		Help: "Tokens of successful model calls, by provider, model and kind: input (not cached), output, cache_read, cache_write.",
	}, []string{"provider", "model", "kind"})
)

// maxModelLabels bounds the model label's values per process: a session
// may name any model (/model), and every name would otherwise be a new
// series of every metric here.
const maxModelLabels = 32

// Instrument wraps p so that every call is counted and timed under the
// provider name given (openai, anthropic, fake): its result, duration,
// time to first token and tokens. Wrap it inside WithRetry to see every
// attempt, retried 429s among them.
func Instrument(p Provider, provider string) Provider {
	return &instrumented{p: p, provider: provider, models: map[string]bool{}}
}

type instrumented struct {
	p        Provider
	provider string

	mu     sync.Mutex
	models map[string]bool
}

func (m *instrumented) Stream(ctx context.Context, req Request, fn func(Delta) error) (*Response, error) {
	model := m.modelLabel(req.Model)
	start := time.Now()
	wrapped := fn
	if fn != nil {
		first := true
		wrapped = func(d Delta) error {
			if first {
				first = false
				firstToken.WithLabelValues(m.provider, model).Observe(time.Since(start).Seconds())
			}
			return fn(d)
		}
	}
	resp, err := m.p.Stream(ctx, req, wrapped)
	requestSeconds.WithLabelValues(m.provider, model).Observe(time.Since(start).Seconds())
	requests.WithLabelValues(m.provider, model, result(err)).Inc()
	if err == nil && resp != nil {
		for _, t := range []struct {
			kind string
			n    int
		}{{"input", resp.Usage.InputTokens}, {"output", resp.Usage.OutputTokens},
			{"cache_read", resp.Usage.CacheReadTokens}, {"cache_write", resp.Usage.CacheWriteTokens}} {
			if t.n > 0 {
				tokens.WithLabelValues(m.provider, model, t.kind).Add(float64(t.n))
			}
		}
	}
	return resp, err
}

// modelLabel is the request's model ("default" when it names none), or
// "other" once maxModelLabels names have been seen.
func (m *instrumented) modelLabel(model string) string {
	if model == "" {
		return "default"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.models[model] {
		return model
	}
	if len(m.models) >= maxModelLabels {
		return "other"
	}
	m.models[model] = true
	return model
}

// result names the outcome of a call for the requests counter.
func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case ClassOf(err) != "":
		return string(ClassOf(err))
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}
