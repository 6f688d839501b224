package llm

import (
	"errors"
	"net/http"
)

// ErrNoProvider means the environment configures no LLM provider.
var ErrNoProvider = errors.New("no llm provider configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL")

// Provider kinds reported by FromEnv.
const (
	KindAnthropic = "anthropic"
	KindOpenAI    = "openai"
	KindNone      = "none"
)

// FromEnv picks a provider from environment variables read through getenv
// (os.Getenv in main, a map in tests):
//
//   - ANTHROPIC_API_KEY (with optional ANTHROPIC_BASE_URL, ANTHROPIC_MODEL)
//     selects Anthropic;
//   - otherwise OPENAI_API_KEY or OPENAI_BASE_URL (with optional
//     OPENAI_MODEL) selects an OpenAI-compatible server; a base URL alone
//     suits keyless local servers such as Ollama.
//
// Setting ANTHROPIC_BASE_URL without a key also selects Anthropic (for the
// fake). It returns the kind chosen, or KindNone and ErrNoProvider. The
// provider is not wrapped in WithRetry.
func FromEnv(getenv func(string) string, hc *http.Client) (Provider, string, error) {
	if key, url := getenv("ANTHROPIC_API_KEY"), getenv("ANTHROPIC_BASE_URL"); key != "" || (url != "" && getenv("OPENAI_API_KEY") == "") {
		return NewAnthropic(AnthropicConfig{
			APIKey:     key,
			BaseURL:    url,
			Model:      getenv("ANTHROPIC_MODEL"),
			HTTPClient: hc,
		}), KindAnthropic, nil
	}
	if key, url := getenv("OPENAI_API_KEY"), getenv("OPENAI_BASE_URL"); key != "" || url != "" {
		return NewOpenAI(OpenAIConfig{
			APIKey:     key,
			BaseURL:    url,
			Model:      getenv("OPENAI_MODEL"),
			HTTPClient: hc,
		}), KindOpenAI, nil
	}
	return nil, KindNone, ErrNoProvider
}
