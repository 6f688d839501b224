package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/cron"
)

// apiJobStore is the cron job store of the API gateway's jobs API. dev
// shares its pool; `gateway api` opens one of its own that connects on
// first use, so the chat API starts, and stays ready, while Postgres is
// away (the jobs API answers 503 meanwhile).
func (a *app) apiJobStore(ctx context.Context) (*cron.Store, error) {
	loc, err := a.cfg.Cron.Location()
	if err != nil {
		return nil, err
	}
	if a.name == "dev" {
		db, err := a.DB(ctx)
		if err != nil {
			return nil, err
		}
		return cron.New(db, loc, nil), nil
	}
	pcfg, err := pgxpool.ParseConfig(a.cfg.Postgres.URL)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if !strings.Contains(a.cfg.Postgres.URL, "pool_max_conns=") {
		pcfg.MaxConns = 4
	}
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	a.onClose(db.Close)
	return cron.New(db, loc, nil), nil
}
