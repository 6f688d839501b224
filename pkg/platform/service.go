package platform

import (
	"context"
	"log/slog"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// Service is a gateway's face to its process: Run and Ready, and the
// kit's Runner for state and tests. Each chat gateway's Service embeds
// it and adds its own accessors.
type Service struct{ runner *Runner }

// NewService runs p on b under the kit's runner with opts, whose log
// defaults to log.
func NewService(p Platform, b *bus.Bus, log *slog.Logger, opts Options) (Service, error) {
	if opts.Log == nil {
		opts.Log = log
	}
	r, err := NewRunner(p, b, opts)
	if err != nil {
		return Service{}, err
	}
	return Service{runner: r}, nil
}

// Run serves until ctx ends.
func (s Service) Run(ctx context.Context) error { return s.runner.Run(ctx) }

// Ready is the readiness check: ready while the platform is connected
// (or its endpoint served), unready with the reason when the platform
// refused the gateway's credentials.
func (s Service) Ready(ctx context.Context) error { return s.runner.Ready(ctx) }

// Runner is the kit's runner (state, tests).
func (s Service) Runner() *Runner { return s.runner }
