package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// userText is the message of every turn: 400 bytes, as in the reference
// pipeline.
var userText = strings.Repeat("u", 400)

type client struct{ http *http.Client }

func newClient(sessions int) *client {
	tr := &http.Transport{MaxIdleConns: sessions + 4, MaxIdleConnsPerHost: sessions + 4, IdleConnTimeout: time.Minute}
	return &client{http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

type chatRequest struct {
	Model    string        `json:"model"`
	Stream   bool          `json:"stream"`
	Messages []chatMessage `json:"messages"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// turn sends one message as session and waits for the whole answer. It
// returns the end-to-end latency, when streaming the time to the first
// content chunk, and the hops the gateway reported (its Server-Timing
// header, or trailer when streaming).
func (c *client) turn(ctx context.Context, addr, session string, stream bool) (e2e, first time.Duration, hops turnTiming, err error) {
	body, _ := json.Marshal(chatRequest{Model: "switchboard", Stream: stream, Messages: []chatMessage{{Role: "user", Content: userText}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, hops, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	t0 := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, 0, hops, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, 0, hops, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, 0, hops, err
		}
		e2e = time.Since(t0)
		if !bytes.Contains(b, []byte("echo: ")) {
			return 0, 0, hops, fmt.Errorf("unexpected answer: %.200s", b)
		}
		return e2e, 0, parseServerTiming(resp.Header.Get("Server-Timing")), nil
	}
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	done := false
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 && bytes.HasPrefix(line, []byte("data: ")) {
			if first == 0 && bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"content":""`)) {
				first = time.Since(t0)
			}
			if bytes.HasPrefix(line, []byte("data: [DONE]")) {
				done = true
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, hops, err
		}
	}
	if !done || first == 0 {
		return 0, 0, hops, fmt.Errorf("stream ended without content or [DONE]")
	}
	e2e = time.Since(t0)
	return e2e, first, parseServerTiming(resp.Trailer.Get("Server-Timing")), nil
}

// measure runs n sessions for warm-up plus the window and reports what
// happened in the window.
func (s *system) measure(ctx context.Context, n int, stream bool) RunResult {
	rr := RunResult{Sessions: n, Stream: stream, PeakRSSMB: map[string]float64{}, CPUByProcessMs: map[string]float64{}}
	c := newClient(n)
	defer c.http.CloseIdleConnections()
	var recording, stopping atomic.Bool
	var turns, errs atomic.Int64
	var lastErr atomic.Value
	lat := make([][]time.Duration, n)
	ttft := make([][]time.Duration, n)
	timings := make([][]turnTiming, n)
	tag := fmt.Sprintf("sbbench-%s-%d-%v-%s", s.shape, n, stream, randomSuffix())
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv, sent := 0, 0
			for !stopping.Load() && ctx.Err() == nil {
				if s.o.conversation > 0 && sent == s.o.conversation {
					conv, sent = conv+1, 0
				}
				session := fmt.Sprintf("%s-%d-%d", tag, i, conv)
				sent++
				e2e, first, hops, err := c.turn(ctx, s.apiAddr, session, stream)
				if !recording.Load() {
					if err != nil {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				if err != nil {
					errs.Add(1)
					lastErr.Store(err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				turns.Add(1)
				lat[i] = append(lat[i], e2e)
				timings[i] = append(timings[i], hops)
				if stream {
					ttft[i] = append(ttft[i], first)
				}
			}
		}()
	}
	sleepCtx(ctx, s.o.warmup)
	profDone := make(chan struct{})
	if s.o.pprofShape == s.shape && s.o.pprofLevel == n && !stream {
		go func() {
			defer close(profDone)
			secs := int(math.Min(10, s.o.duration.Seconds()))
			if err := fetchProfile(s.procs[0].opsAddr, secs, s.o.pprofOut); err != nil {
				log.Printf("cpu profile: %v", err)
			} else {
				log.Printf("cpu profile of %s (%d sessions, %ds) in %s", s.procs[0].name, n, secs, s.o.pprofOut)
			}
		}()
	} else {
		close(profDone)
	}
	workBefore := s.readWork(ctx)
	before, metricsBefore := s.snapshot(), s.scrapeMetrics()
	recording.Store(true)
	t0 := time.Now()
	sleepCtx(ctx, s.o.duration)
	recording.Store(false)
	el := time.Since(t0)
	after, metricsAfter := s.snapshot(), s.scrapeMetrics()
	workAfter := s.readWork(ctx)
	stopping.Store(true)
	wg.Wait()
	<-profDone

	rr.Seconds = el.Seconds()
	rr.Turns = turns.Load()
	rr.Errors = errs.Load()
	if v, ok := lastErr.Load().(string); ok {
		rr.LastError = v
	}
	rr.TurnsPerSec = float64(rr.Turns) / el.Seconds()
	rr.Hops = hopDelta(metricsBefore.hops, metricsAfter.hops, rr.Turns)
	rr.GC = gcDelta(metricsBefore.gc, metricsAfter.gc)
	rr.WorkPerTurn = workAfter.perTurn(workBefore, rr.Turns)
	rr.E2E = percentiles(flatten(lat))
	var all []turnTiming
	for _, t := range timings {
		all = append(all, t...)
	}
	rr.Timeline = timelineMedians(all, flatten(lat))
	if stream {
		p := percentiles(flatten(ttft))
		rr.FirstToken = &p
	}
	if rr.Turns > 0 {
		t := float64(rr.Turns)
		var own float64
		for name, ms := range after.procCPU {
			d := ms - before.procCPU[name]
			own += d
			rr.CPUByProcessMs[name] = round2(d / t)
		}
		rr.CPUmsPerTurn = round2(own / t)
		rr.InfraCPUms = round2((after.infraCPU - before.infraCPU) / t)
		rr.InfraByMs = map[string]float64{}
		for name, ms := range after.infraBy {
			// A process that exited during the window (a closed Postgres
			// connection) is missing from after: its CPU is missing from
			// the split, as from the total.
			rr.InfraByMs[name] = round2((ms - before.infraBy[name]) / t)
		}
		rr.LoadCPUms = round2((after.selfCPU - before.selfCPU) / t)
		rr.MachineCPUms = round2((after.machineCPU - before.machineCPU) / t)
	}
	for _, p := range s.procs {
		rr.PeakRSSMB[p.name] = readStatus(p.cmd.Process.Pid).hwmMB
	}
	return rr
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func fetchProfile(addr string, secs int, out string) error {
	c := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: status %d (is ops.pprof on?)", resp.StatusCode)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func flatten(xs [][]time.Duration) []time.Duration {
	var out []time.Duration
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// percentiles uses the nearest-rank method, as the reference pipeline does.
func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	pct := func(p float64) float64 {
		idx := int(math.Ceil(p*float64(len(d)))) - 1
		idx = max(0, min(idx, len(d)-1))
		return ms(d[idx])
	}
	return Percentiles{P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: ms(d[len(d)-1])}
}

func ms(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond)) }

func round2(v float64) float64 { return math.Round(v*100) / 100 }
