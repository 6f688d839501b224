package main

import (
	"context"
	"os"

	"github.com/switchboard-chat/switchboard/services/admin"
)

func init() {
	registerService(service{name: "admin", start: startAdmin}, true)
	register(command{name: "admin", summary: "run the admin gRPC API (sessions, pairing, deliveries) on admin.addr",
		run: func(ctx context.Context, args []string) error { return runServiceCommand(ctx, "admin", args, "admin") }})
}

// adminDeliveries is set by the delivery wiring when the outbox is in the
// build; nil makes the delivery RPCs answer Unimplemented.
var adminDeliveries func(ctx context.Context, a *app) (admin.Deliveries, error)

func startAdmin(ctx context.Context, a *app) (func(context.Context) error, error) {
	db, err := a.DB(ctx)
	if err != nil {
		return nil, err
	}
	deps := admin.Deps{Log: a.log, DB: db, Token: os.Getenv("SWITCHBOARD_ADMIN_TOKEN"), Health: a.health}
	if adminDeliveries != nil {
		if deps.Deliveries, err = adminDeliveries(ctx, a); err != nil {
			return nil, err
		}
	}
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
