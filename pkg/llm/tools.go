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
// building them through an SDK's parameter types (each schema decoded
// into maps, then encoded again by reflection) cost about a fifth of the
// whole call; now a tool set is encoded once per form.
type toolCache struct {
	m    sync.Map // uint64 hash → toolSet
	size atomic.Int32
}

type toolSet struct {
	form  string
	tools []ToolSpec
	raw   json.RawMessage
}

// maxToolSets bounds the cache; past it, other tool sets are encoded on
// every call.
const maxToolSets = 64

var toolSeed = maphash.MakeSeed()

// get returns tools encoded by encode, which form names (a provider's
// encoding and its options).
func (c *toolCache) get(tools []ToolSpec, form string, encode func([]ToolSpec) (json.RawMessage, error)) (json.RawMessage, error) {
	var h maphash.Hash
	h.SetSeed(toolSeed)
	h.WriteString(form)
	h.WriteByte(0)
	for _, t := range tools {
		h.WriteString(t.Name)
		h.WriteByte(0)
		h.WriteString(t.Description)
		h.WriteByte(0)
		h.Write(t.Parameters)
		h.WriteByte(0)
	}
	key := h.Sum64()
	if v, ok := c.m.Load(key); ok {
		if e := v.(toolSet); e.form == form && sameTools(e.tools, tools) {
			return e.raw, nil
		}
	}
	raw, err := encode(tools)
	if err != nil {
		return nil, err
	}
	if c.size.Load() < maxToolSets {
		if _, loaded := c.m.LoadOrStore(key, toolSet{form: form, tools: slices.Clone(tools), raw: raw}); !loaded {
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

// schemaObject returns a tool's parameters, which must be a JSON object
// schema; none is an empty object schema.
func schemaObject(api string, t ToolSpec) (json.RawMessage, error) {
	p := bytes.TrimSpace(t.Parameters)
	if len(p) == 0 {
		return nil, nil
	}
	if p[0] != '{' || !json.Valid(p) {
		return nil, fmt.Errorf("%s request: tool %s parameters are not a JSON object", api, t.Name)
	}
	return p, nil
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
		schema, err := schemaObject("openai", t)
		if err != nil {
			return nil, err
		}
		out[i] = tool{Type: "function", Function: function{Name: t.Name, Description: t.Description, Parameters: schema}}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("openai request: tools: %w", err)
	}
	return raw, nil
}

// anthropicTools encodes tools as Messages API tools:
// {"name","description","input_schema"}, with a cache breakpoint on the
// last one when cache is set (the tools are part of the cached prefix).
func anthropicTools(tools []ToolSpec, cache bool) (json.RawMessage, error) {
	type cacheControl struct {
		Type string `json:"type"`
	}
	type tool struct {
		Name         string          `json:"name"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"input_schema"`
		CacheControl *cacheControl   `json:"cache_control,omitempty"`
	}
	out := make([]tool, len(tools))
	for i, t := range tools {
		schema, err := schemaObject("anthropic", t)
		if err != nil {
			return nil, err
		}
		if schema == nil {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		out[i] = tool{Name: t.Name, Description: t.Description, InputSchema: schema}
	}
	if cache && len(out) > 0 {
		out[len(out)-1].CacheControl = &cacheControl{Type: "ephemeral"}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("anthropic request: tools: %w", err)
	}
	return raw, nil
}
