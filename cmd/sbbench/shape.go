package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// proc is one running switchboard process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	opsAddr string
	logPath string
	done    chan error
}

// system is one deployment shape with its own database and prefixes.
type system struct {
	o       options
	suffix  string
	shape   string
	dir     string
	dbName  string
	dbURL   string
	apiAddr string
	env     []string
	procs   []*proc
}

// shapeServices lists the processes of a shape: each entry is the
// switchboard arguments of one process.
func shapeServices(shape string) [][]string {
	switch shape {
	case "dev":
		return [][]string{{"dev"}}
	case "split":
		return [][]string{{"router"}, {"worker"}, {"delivery"}, {"gateway", "api"}}
	default: // replicas
		return [][]string{{"router"}, {"router"}, {"worker"}, {"worker"}, {"delivery"}, {"gateway", "api"}}
	}
}

func runShape(ctx context.Context, o options, shape string) ShapeResult {
	sr := ShapeResult{Shape: shape, IdleRSSMB: map[string]float64{}}
	s, err := startSystem(ctx, o, shape)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		sr.Error = err.Error()
		return sr
	}
	for _, p := range s.procs {
		sr.Processes = append(sr.Processes, p.name)
	}
	time.Sleep(time.Second) // let start-up allocations settle before the idle sample
	for _, p := range s.procs {
		st := readStatus(p.cmd.Process.Pid)
		sr.IdleRSSMB[p.name] = st.rssMB
	}
	for _, n := range o.levels {
		for _, stream := range o.streams {
			if ctx.Err() != nil {
				return sr
			}
			rr := s.measure(ctx, n, stream)
			log.Printf("  %s sessions=%d stream=%v: %.0f turns/s, p50 %.2f ms, p99 %.2f ms, errors %d",
				shape, n, stream, rr.TurnsPerSec, rr.E2E.P50, rr.E2E.P99, rr.Errors)
			sr.Runs = append(sr.Runs, rr)
			if err := s.alive(); err != nil {
				sr.Error = err.Error()
				return sr
			}
		}
	}
	return sr
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// withDatabase returns the server URL pointing at another database.
func withDatabase(raw, db string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("postgres url: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

// connectPG opens one connection to the server or database at dbURL.
func connectPG(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	// pool_* parameters are for the services' pools, not one connection.
	if u, err := url.Parse(dbURL); err == nil {
		q := u.Query()
		for k := range q {
			if strings.HasPrefix(k, "pool_") {
				q.Del(k)
			}
		}
		u.RawQuery = q.Encode()
		dbURL = u.String()
	}
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	return c, nil
}

func execSQL(ctx context.Context, serverURL, sql string) error {
	c, err := connectPG(ctx, serverURL)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

func startSystem(ctx context.Context, o options, shape string) (*system, error) {
	suffix := randomSuffix()
	dir, err := os.MkdirTemp("", "sbbench-"+shape+"-*")
	if err != nil {
		return nil, err
	}
	s := &system{o: o, shape: shape, dir: dir, dbName: "sbbench_" + suffix, suffix: suffix}
	if s.dbURL, err = withDatabase(o.pgURL, s.dbName); err != nil {
		return s, err
	}
	if err := execSQL(ctx, o.pgURL, "CREATE DATABASE "+s.dbName); err != nil {
		s.dbName = ""
		return s, err
	}
	if s.apiAddr, err = freeAddr(); err != nil {
		return s, err
	}
	s.env = append(os.Environ(),
		"DATABASE_URL="+s.dbURL,
		"REDIS_URL="+o.redisURL,
		"NATS_URL="+o.natsURL,
		"LOG_LEVEL=warn",
		"SWITCHBOARD_REDIS__PREFIX=sbbench:"+suffix+":",
		"SWITCHBOARD_NATS__PREFIX=sbbench"+suffix,
		"SWITCHBOARD_DEV__NATS_PORT=-1",
		"SWITCHBOARD_DEV__NATS_STORE_DIR="+filepath.Join(dir, "nats"),
		"SWITCHBOARD_OPS__PPROF=true",
		"SWITCHBOARD_LLM__PROVIDER=fake",
		"SWITCHBOARD_ADMIN__ADDR=127.0.0.1:0",
		"SWITCHBOARD_DELIVERY__GRPC_ADDR=127.0.0.1:0",
		"SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR=127.0.0.1:0",
		"SWITCHBOARD_GATEWAYS__API__ADDR="+s.apiAddr,
		"SWITCHBOARD_GATEWAYS__API__INSECURE=true",
		"SWITCHBOARD_GATEWAYS__API__RATE_LIMIT=0",
		"API_SERVER_KEY=",
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=",
	)
	if shape != "dev" {
		cmd := exec.CommandContext(ctx, o.bin, "migrate")
		cmd.Env = s.env
		if out, err := cmd.CombinedOutput(); err != nil {
			return s, fmt.Errorf("migrate: %w: %s", err, out)
		}
	}
	for i, args := range shapeServices(shape) {
		p, err := s.start(i, args)
		if err != nil {
			return s, err
		}
		s.procs = append(s.procs, p)
	}
	for _, p := range s.procs {
		if err := s.waitReady(ctx, p); err != nil {
			return s, err
		}
	}
	return s, s.waitAnswer(ctx)
}

func (s *system) start(i int, args []string) (*proc, error) {
	ops, err := freeAddr()
	if err != nil {
		return nil, err
	}
	name := strings.Join(args, "-")
	p := &proc{name: fmt.Sprintf("%s#%d", name, i), opsAddr: ops, logPath: filepath.Join(s.dir, fmt.Sprintf("%d-%s.log", i, name)), done: make(chan error, 1)}
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(s.o.bin, append(args, "--ops-addr", ops)...)
	p.cmd.Env = s.env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait(); f.Close() }()
	return p, nil
}

func (s *system) waitReady(ctx context.Context, p *proc) error {
	deadline := time.Now().Add(90 * time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	for {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited: %v\n%s", p.name, err, tail(p.logPath))
		default:
		}
		// The last answer is kept for the error: /readyz names what fails.
		resp, err := hc.Get("http://" + p.opsAddr + "/readyz")
		last := ""
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s never ready: %s\n%s", p.name, last, tail(p.logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitAnswer sends one turn so the first measured turn is not the first.
func (s *system) waitAnswer(ctx context.Context) error {
	c := newClient(1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, _, _, err := c.turn(ctx, s.apiAddr, "sbbench-probe-"+randomSuffix(), false)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no answer from the API gateway: %w\n%s", err, s.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *system) alive() error {
	for _, p := range s.procs {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited during the run: %v\n%s", p.name, err, tail(p.logPath))
		default:
		}
	}
	return nil
}

func (s *system) logs() string {
	var b strings.Builder
	for _, p := range s.procs {
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, tail(p.logPath))
	}
	return b.String()
}

// stop terminates the processes (SIGTERM, then SIGKILL after 15 s),
// deletes the run's streams and Redis keys and drops the database.
func (s *system) stop() {
	for _, p := range s.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		select {
		case err := <-p.done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				log.Printf("%s exited with %d after SIGTERM:\n%s", p.name, exit.ExitCode(), tail(p.logPath))
			}
		case <-time.After(15 * time.Second):
			log.Printf("%s still running 15s after SIGTERM; killing it", p.name)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if s.shape != "dev" && !s.o.keep {
		if err := deleteStreams(s.o.natsURL, "SBBENCH"+strings.ToUpper(s.suffix)+"_"); err != nil {
			log.Printf("delete streams: %v", err)
		}
	}
	if !s.o.keep {
		if _, err := deleteKeys(s.o.redisURL, "sbbench:"+s.suffix+":"); err != nil {
			log.Printf("delete redis keys: %v", err)
		}
	}
	if s.dbName != "" && !s.o.keep {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execSQL(ctx, s.o.pgURL, "DROP DATABASE IF EXISTS "+s.dbName+" WITH (FORCE)"); err != nil {
			log.Printf("drop database: %v", err)
		}
	}
	_ = os.RemoveAll(s.dir)
}

func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err == nil && st.Size() > 4000 {
		_, _ = f.Seek(st.Size()-4000, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// deleteStreams removes the streams a run created on the shared NATS
// server (the embedded one of dev goes away with its process).
func deleteStreams(natsURL, prefix string) error {
	nc, err := nats.Connect(natsURL, nats.Name("sbbench"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var del []string
	for n := range names.Name() {
		if strings.HasPrefix(n, prefix) {
			del = append(del, n)
		}
	}
	if err := names.Err(); err != nil {
		return err
	}
	for _, n := range del {
		if err := js.DeleteStream(ctx, n); err != nil {
			return fmt.Errorf("delete stream %s: %w", n, err)
		}
	}
	return nil
}
