package main

import (
	"context"
	"fmt"
	"os"

	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func init() {
	register(command{name: "migrate", summary: "apply the database schema migrations", run: runMigrate})
}

func runMigrate(ctx context.Context, args []string) error {
	var cf commonFlags
	fs := newFlagSet("migrate", &cf)
	create := fs.Bool("create-database", false, "create the database first if it does not exist")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(cfg.Log, os.Stderr).With("process", "migrate")
	if *create {
		if err := pg.EnsureDatabase(ctx, cfg.Postgres.URL); err != nil {
			return err
		}
	}
	db, err := pg.Open(ctx, cfg.Postgres.URL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := pg.Migrate(ctx, db, log); err != nil {
		return err
	}
	v, err := pg.Version(ctx, db)
	if err != nil {
		return err
	}
	fmt.Printf("schema at version %d\n", v)
	return nil
}
