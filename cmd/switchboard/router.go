package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/services/router"
)

func init() {
	registerService(service{name: "router", start: startRouter}, true)
	register(command{name: "router", summary: "run the router: sessions, authorization, pairing, commands, turn ownership",
		run: func(ctx context.Context, args []string) error {
			return runServiceCommand(ctx, "router", args, "router")
		}})
}

func startRouter(ctx context.Context, a *app) (func(context.Context) error, error) {
	b, db, rdb, err := a.clients(ctx)
	if err != nil {
		return nil, err
	}
	s, err := router.New(a.cfg.Router, router.Deps{Log: a.log, Bus: b, DB: db, Redis: rdb, RedisPrefix: a.cfg.Redis.Prefix, Homes: a.cfg.Delivery.HomeOf})
	if err != nil {
		return nil, err
	}
	return s.Run, nil
}
