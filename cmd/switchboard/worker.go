package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/router"
	"github.com/switchboard-chat/switchboard/services/worker"
)

func init() {
	registerService(service{name: "worker", start: startWorker}, true)
	register(command{name: "worker", summary: "run the agent worker (turns → LLM and tools → replies)",
		run: func(ctx context.Context, args []string) error {
			return runServiceCommand(ctx, "worker", args, "worker")
		}})
}

func startWorker(ctx context.Context, a *app) (func(context.Context) error, error) {
	b, db, rdb, err := a.clients(ctx)
	if err != nil {
		return nil, err
	}
	cfg := workerConfig(a.cfg)
	loc, err := a.cfg.Cron.Location()
	if err != nil {
		return nil, err
	}
	deps := worker.Deps{Log: a.log, Bus: b, DB: db, Redis: rdb, Homes: a.cfg.Delivery.HomeOf, Cron: cron.New(db, loc, nil)}
	if cfg.Agent.Backend == "" {
		if deps.LLM, err = a.llmBackend(); err != nil {
			return nil, err
		}
		deps.Providers = map[string]worker.Backend{deps.LLM.Kind: deps.LLM}
	}
	if deps.Transcriber, err = a.transcriber(deps.LLM.Kind); err != nil {
		return nil, err
	}
	deps.Speaker = a.speaker(deps.LLM.Kind)
	w, err := worker.New(cfg, deps)
	if err != nil {
		return nil, err
	}
	return w.Run, nil
}

// workerConfig is the worker's section with what it takes from the
// others.
func workerConfig(c *Config) worker.Config {
	cfg := c.Worker
	cfg.Agent = c.Agent
	cfg.RedisPrefix = c.Redis.Prefix
	cfg.RedactPII = c.Privacy.RedactPII
	cfg.MemoryWriteApproval = c.Memory.WriteApproval
	cfg.ApprovalsMode = c.Approvals.Mode
	cfg.ApprovalsSmartPolicy = c.Approvals.SmartPolicy
	cfg.ApprovalsDenialBreakerThreshold = c.Approvals.DenialBreakerThreshold
	// A picture the gateways may keep is one the worker may read to fit it.
	cfg.Agent.MaxImageSourceBytes = max(cfg.Agent.MaxImageSourceBytes, c.Attachments.MaxBytes)
	// And the voice messages and audio files it may keep, the worker
	// transcribes, each within stt.timeout, its audio's read from the
	// store included.
	cfg.MaxAttachmentBytes = c.Attachments.MaxBytes
	cfg.TranscribeTimeout = c.STT.Timeout
	return cfg
}

// llmBackend builds the provider from the llm section, else from the
// standard environment variables; with neither, dev (or llm.provider:
// fake) runs the fake model in this process.
func (a *app) llmBackend() (worker.Backend, error) {
	c := a.cfg.LLM
	policy := llm.RetryPolicy{MaxAttempts: c.MaxAttempts, CallTimeout: c.CallTimeout, StreamIdleTimeout: c.StreamIdleTimeout, Log: a.log}
	var (
		p    llm.Provider
		kind = c.Provider
	)
	switch c.Provider {
	case "openai":
		p = llm.NewOpenAI(llm.OpenAIConfig{APIKey: c.APIKey, BaseURL: c.BaseURL, Model: c.Model})
	case "anthropic":
		p = llm.NewAnthropic(llm.AnthropicConfig{APIKey: c.APIKey, BaseURL: c.BaseURL, Model: c.Model})
	case "":
		var err error
		p, kind, err = llm.FromEnv(os.Getenv, nil)
		if errors.Is(err, llm.ErrNoProvider) && a.name == "dev" {
			return a.fakeBackend(policy)
		}
		if err != nil {
			return worker.Backend{}, fmt.Errorf("llm: %w (or set llm.provider in the config)", err)
		}
		c = llmFromEnv(c, kind, os.Getenv)
	case "fake":
		return a.fakeBackend(policy)
	}
	c.Model = defaultModel(kind, c.Model)
	sum := sha256.Sum256([]byte(c.APIKey))
	a.log.Info("llm provider configured", "provider", kind, "model", c.Model, "base_url", c.BaseURL)
	return worker.Backend{Provider: llm.WithRetry(llm.Instrument(p, kind), policy), Kind: kind, Model: c.Model, BaseURL: c.BaseURL,
		KeyHash: hex.EncodeToString(sum[:])}, nil
}

// llmFromEnv fills c's key, base URL and model from the environment
// variables of the provider kind that llm.FromEnv chose.
func llmFromEnv(c LLMConfig, kind string, getenv func(string) string) LLMConfig {
	c.APIKey = getenv(map[string]string{llm.KindAnthropic: "ANTHROPIC_API_KEY", llm.KindOpenAI: "OPENAI_API_KEY"}[kind])
	c.BaseURL = getenv(map[string]string{llm.KindAnthropic: "ANTHROPIC_BASE_URL", llm.KindOpenAI: "OPENAI_BASE_URL"}[kind])
	c.Model = getenv(map[string]string{llm.KindAnthropic: "ANTHROPIC_MODEL", llm.KindOpenAI: "OPENAI_MODEL"}[kind])
	return c
}

// defaultModel is model, or the kind's default when it is empty.
func defaultModel(kind, model string) string {
	switch {
	case model != "":
		return model
	case kind == llm.KindAnthropic:
		return "claude-sonnet-4-5"
	}
	return "gpt-4o-mini"
}

// routerProvider is the provider the workers of this configuration use,
// as /provider tells of it: resolved as llmBackend resolves it, without
// the key and without starting anything.
func (a *app) routerProvider() router.Provider {
	c := a.cfg.LLM
	p := router.Provider{Agent: a.cfg.Agent.Backend}
	switch c.Provider {
	case "openai", "anthropic":
		p.Kind, p.Model, p.BaseURL = c.Provider, defaultModel(c.Provider, c.Model), c.BaseURL
	case "fake":
		p.Kind, p.Model = "fake", "fake-model"
	case "":
		_, kind, err := llm.FromEnv(os.Getenv, nil)
		switch {
		case err == nil:
			c = llmFromEnv(c, kind, os.Getenv)
			p.Kind, p.Model, p.BaseURL = kind, defaultModel(kind, c.Model), c.BaseURL
		case a.name == "dev":
			p.Kind, p.Model = "fake", "fake-model"
		}
	}
	return p
}

// modelLister reads the models the workers' provider serves, for a bare
// /model where agent.models is empty: an OpenAI-compatible provider's
// GET /v1/models, with the workers' key (llm section or environment);
// nil for any other provider and for an external agent.
func (a *app) modelLister() router.ModelLister {
	c := a.cfg.LLM
	if a.cfg.Agent.Backend != "" {
		return nil
	}
	switch c.Provider {
	case "openai":
	case "":
		if _, kind, err := llm.FromEnv(os.Getenv, nil); err != nil || kind != llm.KindOpenAI {
			return nil
		}
		c = llmFromEnv(c, llm.KindOpenAI, os.Getenv)
	default:
		return nil
	}
	return llm.NewOpenAI(llm.OpenAIConfig{APIKey: c.APIKey, BaseURL: c.BaseURL})
}

// fakeBackend starts the shipped fake LLM in this process.
func (a *app) fakeBackend(policy llm.RetryPolicy) (worker.Backend, error) {
	fake := fakellm.New(fakellm.Config{Log: a.log, MaxRecorded: -1})
	if err := fake.Start("127.0.0.1:0"); err != nil {
		return worker.Backend{}, fmt.Errorf("start fake llm: %w", err)
	}
	a.onClose(func() { _ = fake.Close() })
	a.fake = fake
	a.announce("Fake LLM", fake.URL()+"/v1")
	a.log.Warn("no LLM provider configured (llm.provider, OPENAI_API_KEY, ANTHROPIC_API_KEY): using the built-in fake model, which echoes",
		"url", fake.URL())
	base := fake.URL() + "/v1"
	// The worker reaches its own fake in-process: HTTP without a socket.
	provider := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: base, Model: "fake-model", HTTPClient: fake.HTTPClient()})
	return worker.Backend{Provider: llm.WithRetry(llm.Instrument(provider, "fake"), policy),
		Kind: "fake", Model: "fake-model", BaseURL: base}, nil
}

// transcriber builds speech-to-text from the stt section (STTConfig);
// nil means voice messages are only named to the model.
func (a *app) transcriber(llmKind string) (worker.Transcriber, error) {
	c := a.cfg.STT
	if c.Provider == "off" {
		return nil, nil
	}
	cfg := llm.OpenAIConfig{APIKey: c.APIKey, BaseURL: c.BaseURL}
	from := "stt"
	if c.Provider == "" && c.APIKey == "" && c.BaseURL == "" {
		switch {
		case llmKind == "fake" && a.fake != nil:
			cfg = llm.OpenAIConfig{BaseURL: a.fake.URL() + "/v1", HTTPClient: a.fake.HTTPClient()}
			from = "the fake model"
		case llmKind == llm.KindOpenAI && a.cfg.LLM.Provider == llm.KindOpenAI:
			cfg = llm.OpenAIConfig{APIKey: a.cfg.LLM.APIKey, BaseURL: a.cfg.LLM.BaseURL}
			from = "llm"
		case llmKind == llm.KindOpenAI:
			cfg = llm.OpenAIConfig{APIKey: os.Getenv("OPENAI_API_KEY"), BaseURL: os.Getenv("OPENAI_BASE_URL")}
			from = "OPENAI_API_KEY"
		default:
			a.log.Info("voice messages are named to the model, not transcribed: no speech-to-text provider (stt.provider, stt.api_key)")
			return nil, nil
		}
	} else if cfg.APIKey == "" && cfg.BaseURL == "" {
		cfg.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	model := c.Model
	if model == "" {
		model = llm.DefaultTranscriptionModel
	}
	a.log.Info("speech-to-text configured", "from", from, "model", model, "base_url", cfg.BaseURL, "timeout", c.Timeout)
	return transcriber{p: llm.NewOpenAI(cfg), model: model}, nil
}

// transcriber adapts llm.OpenAI's transcription to worker.Transcriber;
// the worker bounds it (worker.Config.TranscribeTimeout), with the read
// of its audio.
type transcriber struct {
	p     *llm.OpenAI
	model string
}

func (t transcriber) Transcribe(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
	return t.p.Transcribe(ctx, t.model, audio, filename, mime)
}

// ttsSource is where the tts section (TTSConfig) sends text to speak for
// a model provider of kind llmKind (llm.provider for llmProvider): "tts"
// (its own provider, key or URL), "fake" (the fake model's endpoint),
// "llm" (the llm section's OpenAI endpoint), "env" (OPENAI_API_KEY), or
// "" (none: voice replies are off). The router and the worker resolve it
// alike, so /voice is offered exactly where the workers can speak.
func ttsSource(c TTSConfig, llmKind, llmProvider string) string {
	switch {
	case c.Provider == "off":
		return ""
	case c.Provider != "" || c.APIKey != "" || c.BaseURL != "":
		return "tts"
	case llmKind == "fake":
		return "fake"
	case llmKind == llm.KindOpenAI && llmProvider == llm.KindOpenAI:
		return "llm"
	case llmKind == llm.KindOpenAI:
		return "env"
	}
	return ""
}

// speaker builds text-to-speech from the tts section; nil means voice
// replies are off (/voice says they are not configured).
func (a *app) speaker(llmKind string) worker.Speaker {
	c := a.cfg.TTS
	var cfg llm.OpenAIConfig
	switch from := ttsSource(c, llmKind, a.cfg.LLM.Provider); from {
	case "":
		a.log.Info("voice replies off: no text-to-speech provider (tts.provider, tts.api_key)")
		return nil
	case "tts":
		cfg = llm.OpenAIConfig{APIKey: c.APIKey, BaseURL: c.BaseURL}
		if cfg.APIKey == "" && cfg.BaseURL == "" {
			cfg.APIKey = os.Getenv("OPENAI_API_KEY")
		}
	case "fake":
		if a.fake == nil {
			a.log.Info("voice replies off: the fake model runs in another process (set tts.base_url)")
			return nil
		}
		cfg = llm.OpenAIConfig{BaseURL: a.fake.URL() + "/v1", HTTPClient: a.fake.HTTPClient()}
	case "llm":
		cfg = llm.OpenAIConfig{APIKey: a.cfg.LLM.APIKey, BaseURL: a.cfg.LLM.BaseURL}
	case "env":
		cfg = llm.OpenAIConfig{APIKey: os.Getenv("OPENAI_API_KEY"), BaseURL: os.Getenv("OPENAI_BASE_URL")}
	}
	a.log.Info("text-to-speech configured", "model", c.Model, "voice", c.Voice, "format", c.Format, "base_url", cfg.BaseURL)
	return speaker{p: llm.NewOpenAI(cfg), cfg: c}
}

// speaker adapts llm.OpenAI's speech to worker.Speaker.
type speaker struct {
	p   *llm.OpenAI
	cfg TTSConfig
}

func (s speaker) Speak(ctx context.Context, text string) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	return s.p.Speak(ctx, s.cfg.Model, s.cfg.Voice, s.cfg.Format, text)
}
