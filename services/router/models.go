package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ModelLister lists the models the provider serves: its GET /v1/models
// (llm.OpenAI.Models). Deps.Models; nil where the router reads none.
type ModelLister interface {
	Models(ctx context.Context) ([]string, error)
}

const (
	// providerModelsTTL is how long the provider's list is kept (Redis,
	// shared by the replicas): pickers and their presses read it, not
	// the provider.
	providerModelsTTL = 10 * time.Minute
	// providerModelsWait bounds one read of the provider's list
	// (Hermes's fetch_api_models waits 5 s).
	providerModelsWait = 5 * time.Second
	// maxProviderModels bounds the list kept.
	maxProviderModels = 500
)

// errNoModelList is why a bare /model lists no models when the
// provider's list could not be read.
var errNoModelList = errors.New("provider model list unavailable")

// offered is what a bare /model offers and a picker's press is read
// against: agent.models, else (as Hermes reads an OpenAI-compatible
// endpoint's /models) the provider's own list, kept providerModelsTTL
// in Redis; nil and errNoModelList when it could not be read, nil alone
// when the router reads no list.
func (s *Service) offered(ctx context.Context) ([]string, error) {
	if len(s.cfg.Models) > 0 || s.lister == nil {
		return s.cfg.Models, nil
	}
	key := s.prefix + "providermodels"
	if raw, err := s.rdb.Get(ctx, key).Bytes(); err == nil {
		var models []string
		if json.Unmarshal(raw, &models) == nil && len(models) > 0 {
			return models, nil
		}
	} else if !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read provider models: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, providerModelsWait)
	defer cancel()
	models, err := s.lister.Models(lctx)
	if err != nil || len(models) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log.WarnContext(ctx, "provider model list not read", "err", err, "models", len(models))
		return nil, errNoModelList
	}
	if len(models) > maxProviderModels {
		models = models[:maxProviderModels]
	}
	// The list read is offered even when it cannot be kept: the next
	// /model reads the provider again.
	raw, err := json.Marshal(models)
	if err == nil {
		err = s.rdb.Set(ctx, key, raw, providerModelsTTL).Err()
	}
	if err != nil {
		s.log.WarnContext(ctx, "provider model list not kept", "err", err)
	}
	return models, nil
}
