package telemetry

import (
	"context"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// Attribute names whose values are personal, and how each is
// pseudonymized. Call sites use these names: a session key is
// session_key (or <something>_session_key), a platform's user or chat id
// is user_id or chat_id, whoever did something is by.
var (
	// idAttrs hold one platform id.
	idAttrs = map[string]bool{"user_id": true, "user_id_alt": true, "chat_id": true}
	// keyAttrs hold a session key; so does any name ending in
	// _session_key.
	keyAttrs = map[string]bool{"session_key": true, "first_key": true, "last_key": true}
	// userKeyAttrs hold a user key, "<platform>:<user id>", or a
	// "session:<session key>" owner, or an operator.
	userKeyAttrs = map[string]bool{"by": true, "owner": true, "subject": true, "target": true, "user_key": true}
)

// Pseudonyms returns the Pseudonymizer cfg asks for, nil when
// log.pseudonymize is off.
func (cfg LogConfig) Pseudonyms() *pseudonym.Pseudonymizer {
	if !cfg.Pseudonymize {
		return nil
	}
	return pseudonym.New(cfg.PseudonymKey)
}

// pseudonymizeString is the value to show for the attribute name=s: a
// personal attribute's pseudonymized, any other with the session keys it
// names pseudonymized.
func pseudonymizeString(p *pseudonym.Pseudonymizer, name, s string) string {
	switch {
	case idAttrs[name]:
		return p.ID(s)
	case keyAttrs[name] || strings.HasSuffix(name, "_session_key"):
		return p.Key(s)
	case userKeyAttrs[name]:
		return p.UserKey(s)
	}
	return p.Text(s)
}

// pseudonymizeAttr is a slog.HandlerOptions.ReplaceAttr: the values of
// the personal attributes above become pseudonyms wherever they are (in
// groups too), and a session key inside any other string or error (an
// error message that names one, the log message) becomes its
// pseudonymized form.
func pseudonymizeAttr(p *pseudonym.Pseudonymizer) func(groups []string, a slog.Attr) slog.Attr {
	return func(groups []string, a slog.Attr) slog.Attr {
		v := a.Value // resolved by the handler
		switch {
		case len(groups) == 0 && a.Key == slog.LevelKey:
			// The handler encodes a level that went through a
			// ReplaceAttr as any value, with encoding/json (its
			// MarshalJSON): as a string it writes it as it does
			// without one.
			if l, ok := v.Any().(slog.Level); ok {
				return slog.String(a.Key, l.String())
			}
			return a
		case v.Kind() == slog.KindGroup:
			return a
		case idAttrs[a.Key]:
			// Numbers too: a Telegram id logged as an int64.
			return slog.String(a.Key, p.ID(v.String()))
		case v.Kind() == slog.KindString:
			if s := v.String(); s != "" {
				return slog.String(a.Key, pseudonymizeString(p, a.Key, s))
			}
		case v.Kind() == slog.KindAny:
			if err, ok := v.Any().(error); ok && err != nil {
				if s := err.Error(); strings.Contains(s, "agent:") {
					return slog.String(a.Key, p.Text(s))
				}
			}
		}
		return a
	}
}

// pseudonymizingExporter hands its exporter spans whose names, status
// descriptions and string attributes (the spans' own, their events' —
// a recorded error's message — and their links') are pseudonymized as
// log attributes are.
type pseudonymizingExporter struct {
	sdktrace.SpanExporter
	p *pseudonym.Pseudonymizer
}

func (e pseudonymizingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = pseudonymizedSpan{ReadOnlySpan: s, p: e.p}
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// pseudonymizedSpan is a span as pseudonymizingExporter shows it.
type pseudonymizedSpan struct {
	sdktrace.ReadOnlySpan
	p *pseudonym.Pseudonymizer
}

func (s pseudonymizedSpan) Name() string { return s.p.Text(s.ReadOnlySpan.Name()) }

func (s pseudonymizedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	st.Description = s.p.Text(st.Description)
	return st
}

func (s pseudonymizedSpan) Attributes() []attribute.KeyValue {
	return pseudonymizeKVs(s.p, s.ReadOnlySpan.Attributes())
}

func (s pseudonymizedSpan) Events() []sdktrace.Event {
	events := s.ReadOnlySpan.Events()
	out := make([]sdktrace.Event, len(events))
	for i, ev := range events {
		ev.Attributes = pseudonymizeKVs(s.p, ev.Attributes)
		out[i] = ev
	}
	return out
}

func (s pseudonymizedSpan) Links() []sdktrace.Link {
	links := s.ReadOnlySpan.Links()
	out := make([]sdktrace.Link, len(links))
	for i, l := range links {
		l.Attributes = pseudonymizeKVs(s.p, l.Attributes)
		out[i] = l
	}
	return out
}

// pseudonymizeKVs pseudonymizes string attributes by their names' last
// dot-separated part (session.session_key as session_key) and by what
// they contain; it copies only when something changes.
func pseudonymizeKVs(p *pseudonym.Pseudonymizer, kvs []attribute.KeyValue) []attribute.KeyValue {
	var out []attribute.KeyValue
	for i, kv := range kvs {
		if kv.Value.Type() != attribute.STRING {
			continue
		}
		name := string(kv.Key)
		if j := strings.LastIndexByte(name, '.'); j >= 0 {
			name = name[j+1:]
		}
		s := kv.Value.AsString()
		ps := pseudonymizeString(p, name, s)
		if ps == s {
			continue
		}
		if out == nil {
			out = append([]attribute.KeyValue(nil), kvs...)
		}
		out[i] = attribute.String(string(kv.Key), ps)
	}
	if out == nil {
		return kvs
	}
	return out
}
