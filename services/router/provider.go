package router

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Provider is what /provider tells of the model provider the workers
// use: the llm section (or its environment variables) as they read it.
// It holds no API key; of BaseURL only the host is ever shown.
type Provider struct {
	// Kind is openai, anthropic or fake; "" when none is configured.
	Kind string
	// Model is the default model.
	Model string
	// BaseURL is the provider's endpoint; "" for the kind's own.
	BaseURL string
	// Agent is agent.backend: an external agent runs the turns and
	// chooses its own model ("" for the built-in loop).
	Agent string
}

// providerKinds are the providers a worker can use, in Hermes's
// /provider order: id and label.
var providerKinds = [][2]string{
	{"openai", "OpenAI-compatible"},
	{"anthropic", "Anthropic"},
}

// defaultEndpoints are the hosts a kind calls when no base URL is set.
var defaultEndpoints = map[string]string{"openai": "api.openai.com", "anthropic": "api.anthropic.com"}

// providerText answers /provider as Hermes does: the current provider,
// the providers and which one is configured, how to switch. Switchboard
// has one provider, chosen by the operator (llm.provider); /model
// switches a session's model within it. No key, and no URL beyond its
// host (a URL may carry credentials or a key in its path).
func (s *Service) providerText(sess sessionstore.Session) string {
	p := s.provider
	session := "the default model"
	if sess.ModelOverride != "" {
		session = sess.ModelOverride + " (set with /model)"
	}
	if p.Agent != "" {
		return fmt.Sprintf("🔌 Current provider: an external agent at %s, which chooses its own model.\nThis session: %s\nThe provider is set by the operator (agent.backend).",
			endpointHost(p.Agent, ""), session)
	}
	var b strings.Builder
	switch p.Kind {
	case "":
		b.WriteString("🔌 Current provider: none configured (llm.provider, OPENAI_API_KEY or ANTHROPIC_API_KEY).\n")
	case "fake":
		b.WriteString("🔌 Current provider: the built-in fake model (fake), which echoes.\n")
	default:
		label := p.Kind
		for _, k := range providerKinds {
			if k[0] == p.Kind {
				label = k[1]
			}
		}
		fmt.Fprintf(&b, "🔌 Current provider: %s (%s)\nEndpoint: %s\n", label, p.Kind, endpointHost(p.BaseURL, defaultEndpoints[p.Kind]))
	}
	if p.Model != "" {
		fmt.Fprintf(&b, "Default model: %s\n", p.Model)
	}
	fmt.Fprintf(&b, "This session: %s\n\nAvailable providers:\n", session)
	for _, k := range providerKinds {
		mark, active := "❌", ""
		if k[0] == p.Kind {
			mark, active = "✅", " ← active"
		}
		fmt.Fprintf(&b, "%s %s — %s%s\n", mark, k[0], k[1], active)
	}
	b.WriteString("\nSwitch: /model <name> (this session; /model default goes back). The provider is set by the operator (llm.provider).")
	return b.String()
}

// endpointHost is the host (and port) of a URL, without its scheme,
// credentials, path or query; def when raw is empty, and "a custom
// endpoint" when raw is not a URL with a host.
func endpointHost(raw, def string) string {
	if raw == "" {
		return def
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "a custom endpoint"
	}
	return u.Host
}
