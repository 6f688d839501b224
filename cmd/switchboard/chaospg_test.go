//go:build chaos

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/pg"
)

// chaosPG is a throwaway PostgreSQL cluster of the harness: initdb into a
// temp dir, trust auth, its own port and socket directory, so a fault can
// crash and restart it without disturbing the machine's cluster.
// fsync is off: the fault is a crash of the server's processes (written
// data survives in the page cache), not of the machine.
type chaosPG struct {
	bin  string // directory of initdb and pg_ctl
	dir  string // owned by the server's user: data/, the socket, the log
	port string
	// asUser is the OS user the server runs as ("" for the current one):
	// PostgreSQL refuses to run as root.
	asUser string
}

// pgBinDir finds PostgreSQL's server binaries: CHAOS_PG_BIN, else the
// newest /usr/lib/postgresql/<version>/bin (Debian's layout).
func pgBinDir() string {
	if d := os.Getenv("CHAOS_PG_BIN"); d != "" {
		return d
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi < vj
	})
	if len(found) == 0 {
		return ""
	}
	return filepath.Dir(found[len(found)-1])
}

// startChaosPG initialises and starts a private cluster, or returns nil
// when no PostgreSQL server binaries are installed.
func startChaosPG(t *testing.T, logDir string) *chaosPG {
	t.Helper()
	bin := pgBinDir()
	if bin == "" {
		return nil
	}
	dir, err := os.MkdirTemp("", "chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosPG{bin: bin, dir: dir, port: freePort(t)}
	t.Cleanup(func() {
		_ = p.stop("immediate")
		if data, err := os.ReadFile(p.logFile()); err == nil {
			_ = os.WriteFile(filepath.Join(logDir, "postgres.log"), data, 0o644)
		}
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user for the private cluster: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.asUser = "postgres"
	}
	if out, err := p.command("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *chaosPG) data() string    { return filepath.Join(p.dir, "data") }
func (p *chaosPG) logFile() string { return filepath.Join(p.dir, "postgres.log") }

// URL of database name in the cluster.
func (p *chaosPG) URL(name string) string {
	return "postgres://postgres@127.0.0.1:" + p.port + "/" + name + "?sslmode=disable"
}

// command runs a server binary as the cluster's user.
func (p *chaosPG) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(p.bin, name)
	var cmd *exec.Cmd
	if p.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", p.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = p.dir
	return cmd
}

// start starts the server and waits until it accepts connections.
func (p *chaosPG) start() error {
	opts := fmt.Sprintf("-p %s -c listen_addresses=127.0.0.1 -k %s -c fsync=off -c max_connections=200", p.port, p.dir)
	if out, err := p.command("pg_ctl", "-D", p.data(), "-l", p.logFile(), "-w", "-t", "120", "-o", opts, "start").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	return nil
}

// stop stops the server; mode "immediate" is a crash (no checkpoint,
// clients cut off, recovery from the WAL on the next start).
func (p *chaosPG) stop(mode string) error {
	if out, err := p.command("pg_ctl", "-D", p.data(), "-m", mode, "-w", "-t", "60", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// database creates and migrates a database in the cluster and returns a
// pool on it and its URL.
func (p *chaosPG) database(t *testing.T, name string) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := p.URL(name)
	if err := pg.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	db, err := pg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := pg.Migrate(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	return db, url
}
