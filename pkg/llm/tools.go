package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
)

// toolCache keeps the encoded "tools" of the tool sets a provider was
// called with. A worker sends the same few tools on every call, and
// building them through the SDK's parameter types (each schema decoded
// into maps, then encoded again by reflection) cost about a fifth of the
// whole call; now a tool set is encoded once.
type toolCache struct {
	m    sync.Map // uint64 hash → toolSet
	size atomic.Int32
}

type toolSet struct {
	tools []ToolSpec
	raw   json.RawMessage
}

// maxToolSets bounds the cache; past it, other tool sets are encoded on
// every call.
const maxToolSets = 64

var toolSeed = maphash.MakeSeed()

// json returns tools as the chat-completions "tools" array.
func (c *toolCache) json(tools []ToolSpec) (json.RawMessage, error) {
	var h maphash.Hash
	h.SetSeed(toolSeed)
	for _, t := range tools {
		h.WriteString(t.Name)
		h.WriteByte(0)
		h.WriteString(t.Description)
		h.WriteByte(0)
		h.Write(t.Parameters)
		h.WriteByte(0)
	}
	key := h.Sum64()
	if v, ok := c.m.Load(key); ok && sameTools(v.(toolSet).tools, tools) {
		return v.(toolSet).raw, nil
	}
	raw, err := openAITools(tools)
	if err != nil {
		return nil, err
	}
	if c.size.Load() < maxToolSets {
		if _, loaded := c.m.LoadOrStore(key, toolSet{tools: slices.Clone(tools), raw: raw}); !loaded {
			c.size.Add(1)
		}
	}
	return raw, nil
}

func sameTools(a, b []ToolSpec) bool {
	return slices.EqualFunc(a, b, func(x, y ToolSpec) bool {
		return x.Name == y.Name && x.Description == y.Description && bytes.Equal(x.Parameters, y.Parameters)
	})
}

// openAITools encodes tools as chat-completions function tools:
// {"type":"function","function":{"name","description","parameters"}}.
func openAITools(tools []ToolSpec) (json.RawMessage, error) {
	type function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	out := make([]tool, len(tools))
	for i, t := range tools {
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && (p[0] != '{' || !json.Valid(p)) {
			return nil, fmt.Errorf("openai request: tool %s parameters are not a JSON object", t.Name)
		}
		out[i] = tool{Type: "function", Function: function{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("openai request: tools: %w", err)
	}
	return raw, nil
}
