// Package fakellm is a fake LLM server for tests, benchmarks and
// `switchboard dev`. It speaks enough of the OpenAI chat-completions and the
// Anthropic Messages wire formats, streamed and not, that the official SDKs
// parse its answers.
//
// By default it answers deterministically with "echo: <last user text>",
// split into a few deltas. Tests steer it through the Go API (Enqueue,
// SetScript, FailNext) or through magic text in the last user message, so an
// end-to-end test that only controls the chat message can still trigger tool
// calls and failures:
//
//	[[tool:clock {"tz":"UTC"}]]   call tool clock first, answer after its result
//	[[fail:429 retry=2 times=1]]  answer 429 with Retry-After: 2, once
//	[[fail:500]] [[fail:402]] [[fail:401]] [[fail:overflow]] [[fail:quota]]
//	[[drop:2]]                    stream two chunks, then drop the connection
//	[[slow:50ms]]                 wait 50ms between chunks
//	[[latency:1s]]                wait 1s before answering
//	[[verdict:continue times=2]]  as a goal judge: continue twice (then the next verdict)
//	[[risk:approve]]              as a smart-approval judge: APPROVE (deny, escalate, garbage, fail)
//
// Every directive accepts times=N: it then applies to the first N requests
// carrying the same user text, and later ones get the normal answer. A
// verdict's uses are counted by the line it is written in (judge.go).
package fakellm

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes the fake. The zero value answers instantly.
type Config struct {
	// Addr is the listen address Run uses, default "127.0.0.1:0".
	Addr string
	// Model is reported when a request names none, default "fake-model".
	Model string
	// Models are the ids GET /v1/models lists, in order; empty: Model.
	Models []string
	// Latency is waited before every answer.
	Latency time.Duration
	// ChunkDelay is waited between streamed chunks.
	ChunkDelay time.Duration
	// Chunks is how many text deltas an answer is split into, default 3.
	Chunks int
	// APIKey, when set, is required as "Authorization: Bearer" (OpenAI) or
	// "x-api-key" (Anthropic); other requests get 401.
	APIKey string
	// MaxRecorded bounds the requests kept for Requests, default 10000;
	// when full, the oldest half is forgotten.
	// Negative disables recording (for benchmarks).
	MaxRecorded int
	// Log receives errors; default slog.Default().
	Log *slog.Logger
	// TextOnly refuses requests with images as a model without vision
	// does (400, invalid_request_error).
	TextOnly bool
	// FastModels, when set, are the only models that take OpenAI's
	// service_tier "priority" or Anthropic's speed "fast": a request
	// asking either for another model is refused (400,
	// invalid_request_error), as a provider refuses a tier or speed the
	// model does not offer. Empty: every model takes them.
	FastModels []string
}

// Message is one decoded conversation message, the same for both wire
// formats. Anthropic tool_result blocks become Role "tool" messages.
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	Images     []Image // pictures of a user message
	// Thinking is an Anthropic assistant message's thinking blocks, in
	// the order they came.
	Thinking []Thinking
}

// Thinking is an Anthropic thinking block: its text and signature, or
// a redacted block's data.
type Thinking struct {
	Text      string
	Signature string
	Redacted  string
}

// ThinkingConfig is an Anthropic request's thinking parameter.
type ThinkingConfig struct {
	Type         string // enabled, adaptive or disabled
	BudgetTokens int    // enabled
	Display      string // summarized, omitted or ""
}

// Image is a picture the fake received: decoded bytes, or a URL.
type Image struct {
	MediaType string
	Data      []byte
	URL       string // for a picture the model would fetch
	// Detail is the image_url's detail (low, high, auto …), "" when the
	// request gave none.
	Detail string
}

// imageFromURL decodes an OpenAI image_url: a base64 data: URL, or a URL.
func imageFromURL(u string) Image {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return Image{URL: u}
	}
	meta, payload, _ := strings.Cut(rest, ",")
	mt, _, _ := strings.Cut(meta, ";")
	data, _ := base64.StdEncoding.DecodeString(payload)
	return Image{MediaType: mt, Data: data}
}

// String describes the picture as the fake's echo shows it: its type,
// size and the start of its SHA-256, or its URL.
func (img Image) String() string {
	if img.URL != "" {
		return img.URL
	}
	sum := sha256.Sum256(img.Data)
	return fmt.Sprintf("%s %d B sha256:%x", img.MediaType, len(img.Data), sum[:4])
}

// ToolCall is a tool invocation by the model.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON
}

// Tool is a tool offered to the model.
type Tool struct {
	Name        string
	Description string
	Parameters  []byte // JSON schema as sent
	Cached      bool   // Anthropic cache_control marker present
}

// Request is what the fake received, decoded.
type Request struct {
	API          string // "openai" or "anthropic"
	Model        string
	System       string // concatenated system text (OpenAI: system/developer messages)
	SystemCached bool   // Anthropic cache_control on a system block
	Messages     []Message
	Tools        []Tool
	Stream       bool
	IncludeUsage bool
	MaxTokens    int
	Temperature  *float64
	// ReasoningEffort is the effort the request asked for ("" none),
	// from ReasoningField: "reasoning_effort" (OpenAI's field),
	// "reasoning" (OpenRouter's object; "none" when it is disabled) or
	// "output_config" (Anthropic's output_config.effort).
	ReasoningEffort string
	ReasoningField  string
	// Thinking is an Anthropic request's thinking parameter, nil when
	// it sent none.
	Thinking *ThinkingConfig
	// ServiceTier is an OpenAI request's service_tier ("" none sent);
	// Speed an Anthropic request's speed ("" none sent).
	ServiceTier string
	Speed       string
	Header      http.Header
}

// LastUserText returns the content of the last user message.
func (r *Request) LastUserText() string {
	if i := r.lastUser(); i >= 0 {
		return r.Messages[i].Content
	}
	return ""
}

func (r *Request) lastUser() int {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return i
		}
	}
	return -1
}

// Usage is the token accounting the fake reports.
type Usage struct {
	InputTokens      int
	OutputTokens     int
	CacheReadTokens  int
	CacheWriteTokens int
}

// Reply is one scripted answer: text, tool calls, or a failure.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	// Reasoning is the model's thinking, sent before the text as
	// reasoning_content (OpenAI-compatible servers: DeepSeek, vLLM …),
	// or as a signed thinking block to an Anthropic request that turned
	// thinking on (ThinkingSignature).
	Reasoning string
	// Failure, when set, replaces the answer.
	Failure *Failure
	// Usage overrides the computed token counts.
	Usage *Usage
	// Truncated ends the answer as cut at the output limit (max_tokens):
	// OpenAI's finish_reason "length", Anthropic's stop_reason
	// "max_tokens". Text and ToolCalls are sent as given, so a test cuts
	// a call's Arguments where the limit would; a whole (not streamed)
	// Anthropic answer sends arguments that are not JSON as {}, as the
	// API's parsed input would be.
	Truncated bool
}

// Failure describes an injected fault. Status > 0 answers with that HTTP
// status and an error body; DropAfter > 0 streams that many chunks and then
// drops the connection (non-streamed requests are dropped before any byte);
// StallAfter > 0 streams that many chunks and then goes silent.
type Failure struct {
	Status     int
	RetryAfter time.Duration // sent as Retry-After seconds (rounded up) and retry-after-ms
	Type       string        // error code, e.g. "insufficient_quota", "context_length_exceeded"
	Message    string
	DropAfter  int
	// StallAfter > 0 streams that many chunks and then sends nothing
	// more, holding the connection open until the client gives up: a
	// provider stuck mid-stream. With StallPing > 0 it meanwhile sends a
	// keep-alive every StallPing (an SSE comment for OpenAI, a "ping"
	// event for Anthropic), as real providers and proxies do.
	StallAfter int
	StallPing  time.Duration
	ChunkDelay time.Duration // slow stream: delay between chunks
	Latency    time.Duration // delay before answering
}

// ScriptFunc decides the answer for a request. Returning false falls back to
// the default behaviour (magic text, then echo).
type ScriptFunc func(req *Request) (Reply, bool)

// Server is the fake. It is an http.Handler; Start or Run also serve it.
type Server struct {
	cfg  Config
	log  *slog.Logger
	mux  *http.ServeMux
	seq  atomic.Uint64
	seed maphash.Seed

	mu             sync.Mutex
	recorded       []Request
	fails          []pendingFailure
	queue          []Reply
	modelQueues    map[string][]Reply // EnqueueFor's, by the model asked for
	script         ScriptFunc
	times          map[uint64]int      // directive+text hash → uses
	systems        map[uint64]struct{} // system prompts seen, for cache accounting
	transcriptions []Transcription
	speeches       []Speech
	speechFails    []pendingFailure

	hs   *http.Server
	url  string
	pipe *pipeListener // in-process connections (HTTPClient)
}

type pendingFailure struct {
	n int
	f Failure
}

// New builds a fake with cfg's defaults filled in.
func New(cfg Config) *Server {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Model == "" {
		cfg.Model = "fake-model"
	}
	if cfg.Chunks <= 0 {
		cfg.Chunks = 3
	}
	if cfg.MaxRecorded == 0 {
		cfg.MaxRecorded = 10000
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Log,
		mux:     http.NewServeMux(),
		seed:    maphash.MakeSeed(),
		times:   make(map[uint64]int),
		systems: make(map[uint64]struct{}),
		pipe:    newPipeListener(),
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleOpenAI)
	s.mux.HandleFunc("POST /chat/completions", s.handleOpenAI)
	s.mux.HandleFunc("POST /v1/audio/transcriptions", s.handleTranscription)
	s.mux.HandleFunc("POST /audio/transcriptions", s.handleTranscription)
	s.mux.HandleFunc("POST /v1/audio/speech", s.handleSpeech)
	s.mux.HandleFunc("POST /audio/speech", s.handleSpeech)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /models", s.handleModels)
	s.mux.HandleFunc("POST /v1/messages", s.handleAnthropic)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return s
}

// ServeHTTP serves the OpenAI and Anthropic endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Start listens on addr ("" means Config.Addr) and serves in the background.
func (s *Server) Start(addr string) error {
	if addr == "" {
		addr = s.cfg.Addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen fakellm: %w", err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.hs = hs
	s.url = "http://" + ln.Addr().String()
	s.mu.Unlock()
	for _, l := range []net.Listener{ln, s.pipe} {
		go func() {
			if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("fakellm serve", "err", err)
			}
		}()
	}
	return nil
}

// URL is the base URL after Start, e.g. "http://127.0.0.1:41234". OpenAI
// clients want URL()+"/v1", Anthropic clients URL().
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Close stops serving immediately.
func (s *Server) Close() error {
	s.mu.Lock()
	hs := s.hs
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	return hs.Close()
}

// Run serves on Config.Addr until ctx ends, then shuts down gracefully,
// giving in-flight answers up to five seconds.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(""); err != nil {
		return err
	}
	s.log.Info("fakellm listening", "url", s.URL())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	hs := s.hs
	s.mu.Unlock()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown fakellm: %w", err)
	}
	return nil
}

// Requests returns a copy of the recorded requests, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.recorded...)
}

// Reset forgets recorded requests, queued replies, failures and counters.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = nil
	s.fails = nil
	s.queue = nil
	s.modelQueues = nil
	clear(s.times)
	clear(s.systems)
	s.transcriptions = nil
	s.speeches = nil
	s.speechFails = nil
}

// FailNext makes the next n requests fail with f.
func (s *Server) FailNext(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails = append(s.fails, pendingFailure{n: n, f: f})
}

// Enqueue queues replies used, in order, by the next requests before any
// script or magic text.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// EnqueueFor queues replies used, in order, by the next requests that
// name model, before the replies Enqueue queued (which requests for
// other models still take): a test of several models called at once
// (a Mixture of Agents) decides each one's answer whatever the order
// the calls arrive in.
func (s *Server) EnqueueFor(model string, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.modelQueues == nil {
		s.modelQueues = map[string][]Reply{}
	}
	s.modelQueues[model] = append(s.modelQueues[model], replies...)
}

// SetScript installs fn (nil removes it).
func (s *Server) SetScript(fn ScriptFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = fn
}

func (s *Server) record(req *Request) {
	if s.cfg.MaxRecorded < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recorded) >= s.cfg.MaxRecorded {
		// Forget the oldest half at once: amortised O(1) per request.
		n := copy(s.recorded, s.recorded[len(s.recorded)-s.cfg.MaxRecorded/2:])
		clear(s.recorded[n:])
		s.recorded = s.recorded[:n]
	}
	s.recorded = append(s.recorded, *req)
}

// plan is the decided answer for one request.
type plan struct {
	reply      Reply
	usage      Usage
	latency    time.Duration
	chunkDelay time.Duration
	chunks     int
	id         uint64
}

// decide picks the answer: pending failures, replies queued for the
// model asked for, queued replies, the script, magic text, then echo.
func (s *Server) decide(req *Request) plan {
	p := plan{latency: s.cfg.Latency, chunkDelay: s.cfg.ChunkDelay, chunks: s.cfg.Chunks, id: s.seq.Add(1)}
	s.mu.Lock()
	script := s.script
	decided := false
	if len(s.fails) > 0 {
		f := s.fails[0].f
		p.reply = Reply{Failure: &f}
		if s.fails[0].n--; s.fails[0].n <= 0 {
			s.fails = s.fails[1:]
		}
		decided = true
	} else if q := s.modelQueues[req.Model]; len(q) > 0 {
		p.reply = q[0]
		s.modelQueues[req.Model] = q[1:]
		decided = true
	} else if len(s.queue) > 0 {
		p.reply = s.queue[0]
		s.queue = s.queue[1:]
		decided = true
	}
	s.mu.Unlock()
	if !decided && s.cfg.TextOnly && hasImages(req) {
		p.reply = Reply{Failure: &Failure{Status: http.StatusBadRequest, Message: textOnlyMessage}}
		decided = true
	}
	if !decided && script != nil {
		p.reply, decided = script(req)
	}
	if !decided {
		p.reply = s.magic(req, &p)
	} else if f := p.reply.Failure; f != nil && f.Status == 0 && p.reply.Text == "" && len(p.reply.ToolCalls) == 0 {
		// A drop or slow stream still streams the normal answer.
		p.reply = s.magic(req, &p)
		if p.reply.Failure == nil {
			p.reply.Failure = f
		}
	}
	if f := p.reply.Failure; f != nil {
		if f.ChunkDelay > 0 {
			p.chunkDelay = f.ChunkDelay
		}
		if f.Latency > 0 {
			p.latency = f.Latency
		}
	}
	p.usage = s.usage(req, &p.reply)
	return p
}

// textOnlyMessage is what a TextOnly fake answers a request with images.
const textOnlyMessage = "Invalid content type. image_url is only supported by certain models."

func hasImages(req *Request) bool {
	for i := range req.Messages {
		if len(req.Messages[i].Images) > 0 {
			return true
		}
	}
	return false
}

// appendImages appends a note of each picture, so tests see what reached
// the model.
func appendImages(b []byte, images []Image) []byte {
	for _, img := range images {
		b = append(b, " [image "...)
		b = append(b, img.String()...)
		b = append(b, ']')
	}
	return b
}

// magic applies directives in the last user message, else echoes it.
func (s *Server) magic(req *Request, p *plan) Reply {
	i := req.lastUser()
	if i < 0 {
		return Reply{Text: "echo: "}
	}
	text := req.Messages[i].Content
	dirs, clean := ParseDirectives(text)
	if judgeRequest(req) {
		return s.verdict(dirs, text)
	}
	if riskRequest(req) {
		return s.risk(dirs, text)
	}
	var tools []Directive
	var fail *Failure
	recall := false
	for _, d := range dirs {
		if d.Kind == KindVerdict || d.Kind == KindRisk {
			continue // for a judge's request only
		}
		if d.Times > 0 && !s.use(d, text) {
			continue
		}
		switch d.Kind {
		case KindTool:
			tools = append(tools, d)
		case KindSlow:
			p.chunkDelay = d.Delay
		case KindLatency:
			p.latency = d.Delay
		case KindFail, KindDrop:
			if fail == nil {
				f := d.Failure
				fail = &f
			}
		case KindRecall:
			recall = true
		}
	}
	if recall {
		// Shows which earlier user messages the conversation carried, so
		// end-to-end tests can check history reached the model.
		var prior []string
		for _, m := range req.Messages[:i] {
			if m.Role == "user" {
				_, c := ParseDirectives(m.Content)
				prior = append(prior, c)
			}
		}
		return Reply{Text: "recall: " + strings.Join(prior, " | "), Failure: fail}
	}
	if fail != nil && fail.Status > 0 {
		return Reply{Failure: fail}
	}
	// Tool results after the user message tell how far the tool script got.
	var results []Message
	for _, m := range req.Messages[i+1:] {
		if m.Role == "tool" {
			results = append(results, m)
		}
	}
	if len(results) < len(tools) {
		d := tools[len(results)]
		return Reply{ToolCalls: []ToolCall{{Name: d.Name, Arguments: d.Args}}, Failure: fail}
	}
	images := req.Messages[i].Images
	if len(results) == 0 && len(images) == 0 {
		return Reply{Text: "echo: " + clean, Failure: fail}
	}
	b := make([]byte, 0, len(clean)+64)
	b = append(b, "echo: "...)
	b = append(b, clean...)
	b = appendImages(b, images)
	for _, r := range results {
		b = append(b, " ["...)
		b = append(b, r.Content...)
		b = append(b, ']')
	}
	return Reply{Text: string(b), Failure: fail}
}

// use counts one use of a times=N directive and reports whether it applies.
func (s *Server) use(d Directive, text string) bool {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(d.Raw)
	h.WriteByte(0)
	h.WriteString(text)
	k := h.Sum64()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.times[k]
	if n >= d.Times {
		return false
	}
	s.times[k] = n + 1
	return true
}

// usage estimates tokens as bytes/4; a cached system prompt seen before is
// reported as a cache read, the first time as a cache write.
func (s *Server) usage(req *Request, r *Reply) Usage {
	if r.Usage != nil {
		return *r.Usage
	}
	in := len(req.System)
	for i := range req.Messages {
		in += len(req.Messages[i].Content) + len(req.Messages[i].Role)
	}
	out := len(r.Text)
	for _, tc := range r.ToolCalls {
		out += len(tc.Name) + len(tc.Arguments)
	}
	u := Usage{InputTokens: in/4 + 1, OutputTokens: out/4 + 1}
	cacheable := req.SystemCached || (req.API == "openai" && len(req.System) >= 1024)
	if cacheable && req.System != "" {
		k := maphash.String(s.seed, req.System)
		sys := len(req.System)/4 + 1
		s.mu.Lock()
		_, seen := s.systems[k]
		if !seen && len(s.systems) < 4096 {
			s.systems[k] = struct{}{}
		}
		s.mu.Unlock()
		if seen {
			u.CacheReadTokens = sys
		} else if req.API == "anthropic" {
			u.CacheWriteTokens = sys
		}
	}
	return u
}

// wait sleeps d or until ctx ends, reporting false on the latter.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// split cuts text into at most n pieces on rune boundaries, without copying.
func split(text string, n int, fn func(piece string) bool) {
	if n < 1 {
		n = 1
	}
	size := (len(text) + n - 1) / n
	if size == 0 {
		return
	}
	for len(text) > 0 {
		end := min(size, len(text))
		for end < len(text) && !runeStart(text[end]) {
			end++
		}
		if !fn(text[:end]) {
			return
		}
		text = text[end:]
	}
}

func runeStart(b byte) bool { return b&0xC0 != 0x80 }

// checkKey enforces Config.APIKey.
func (s *Server) checkKey(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	if r.Header.Get("x-api-key") == s.cfg.APIKey {
		return true
	}
	return r.Header.Get("Authorization") == "Bearer "+s.cfg.APIKey
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if !s.checkKey(r) {
		writeFailure(w, "openai", &Failure{Status: http.StatusUnauthorized})
		return
	}
	ids := s.cfg.Models
	if len(ids) == 0 {
		ids = []string{s.cfg.Model}
	}
	b := make([]byte, 0, 128)
	b = append(b, `{"object":"list","data":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, id)
		b = append(b, `,"object":"model","created":1700000000,"owned_by":"fakellm"}`...)
	}
	b = append(b, `]}`...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// openAIServiceTiers are the service_tier values OpenAI's chat
// completions take.
var openAIServiceTiers = []string{"auto", "default", "flex", "scale", "priority"}

// refuseFast is why the provider would refuse req's service_tier or
// speed (its invalid_request_error message), or "": a value the API does
// not know, Anthropic's speed without the fast mode beta, and a fast
// tier for a model outside Config.FastModels.
func (s *Server) refuseFast(req *Request) string {
	switch req.API {
	case "openai":
		if req.ServiceTier == "" {
			return ""
		}
		if !slices.Contains(openAIServiceTiers, req.ServiceTier) {
			return "Invalid value: '" + req.ServiceTier + "'. Supported values are: 'auto', 'default', 'flex', 'scale', and 'priority'."
		}
		if req.ServiceTier == "priority" && len(s.cfg.FastModels) > 0 && !slices.Contains(s.cfg.FastModels, req.Model) {
			return "The requested service tier 'priority' is not available for model '" + req.Model + "'."
		}
	case "anthropic":
		if req.Speed == "" {
			return ""
		}
		if req.Speed != "standard" && req.Speed != "fast" {
			return "speed: Input should be 'standard' or 'fast'"
		}
		beta := false
		for _, v := range req.Header.Values("anthropic-beta") {
			for _, b := range strings.Split(v, ",") {
				beta = beta || strings.TrimSpace(b) == "fast-mode-2026-02-01"
			}
		}
		if !beta {
			return "speed: the fast-mode-2026-02-01 beta is required to set speed"
		}
		if req.Speed == "fast" && len(s.cfg.FastModels) > 0 && !slices.Contains(s.cfg.FastModels, req.Model) {
			return "speed: fast mode is not supported for model '" + req.Model + "'"
		}
	}
	return ""
}
