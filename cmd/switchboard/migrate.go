package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func init() {
	register(command{name: "migrate", summary: "apply the database schema migrations", run: runMigrate})
}

func runMigrate(ctx context.Context, args []string) error { return migrate(ctx, args, os.Stderr) }

// migrate is runMigrate logging to logOut.
func migrate(ctx context.Context, args []string, logOut io.Writer) error {
	var cf commonFlags
	fs := newFlagSet("migrate", &cf)
	create := fs.Bool("create-database", false, "create the database first if it does not exist")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, warnings, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(cfg.Log, logOut).With("process", "migrate")
	// Reported as the services report them: a misspelt postgres key
	// would otherwise migrate the default database without a word.
	for _, w := range warnings {
		log.Warn(w.String())
	}
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
