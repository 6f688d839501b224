package main

import (
	"context"
	"os"

	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/services/admin"
)

func init() {
	registerService(service{name: "admin", start: startAdmin}, true)
	register(command{name: "admin", summary: "run the admin gRPC API (sessions, pairing, deliveries) on admin.addr",
		run: func(ctx context.Context, args []string) error { return runServiceCommand(ctx, "admin", args, "admin") }})
}

func startAdmin(ctx context.Context, a *app) (func(context.Context) error, error) {
	db, err := a.DB(ctx)
	if err != nil {
		return nil, err
	}
	deps := admin.Deps{Log: a.log, DB: db, Token: os.Getenv("SWITCHBOARD_ADMIN_TOKEN"), Health: a.health,
		Deliveries: &outbox.Admin{Store: outbox.New(db), TTL: a.cfg.Delivery.TTL}}
	s, err := admin.New(a.cfg.Admin, deps)
	if err != nil {
		return nil, err
	}
	if err := s.Listen(); err != nil {
		return nil, err
	}
	a.announce("Admin API (gRPC)", s.Addr())
	return s.Run, nil
}
