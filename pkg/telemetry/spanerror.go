package telemetry

import (
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// spanPseudonyms is the Pseudonymizer of the spans SetupTracing exports
// (TraceConfig.Pseudonyms); nil when they are exported as they are.
var spanPseudonyms atomic.Pointer[pseudonym.Pseudonymizer]

// SpanError sets span's status to an error described by err's text. With
// pseudonyms on, the ids err is marked as naming (pseudonym.Naming) and
// ids, those of the chat or user the work was about, are replaced in
// the text by their pseudonyms, as in a log record's error: a span
// names no chat to take them from, and its exporter sees the text only.
// (Session keys in it become pseudonyms in the exporter, as in every
// span's texts.)
func SpanError(span trace.Span, err error, ids ...string) {
	if err == nil {
		return
	}
	text := err.Error()
	if p := spanPseudonyms.Load(); p != nil && span.IsRecording() {
		text = p.Text(text)
		if named := append(pseudonym.NamedIDs(err), ids...); len(named) > 0 {
			text = p.Scrub(text, named...)
		}
	}
	span.SetStatus(codes.Error, text)
}

// Reason describes a span's failure by a fixed word or phrase ("decode",
// "tool failed", an error's class), never by an error's text, which may
// name a chat or a user (SpanError describes a span by an error). A
// constant is one as it is; a string from elsewhere needs a conversion,
// which says it names no one.
type Reason string

// SpanFailed sets span's status to an error described by reason. It and
// SpanError are the only ways this code base marks a span failed
// (TestSpansFailOnlyThroughTheHelpers): a direct SetStatus or
// RecordError hands its text to the exporter as it is.
func SpanFailed(span trace.Span, reason Reason) {
	span.SetStatus(codes.Error, string(reason))
}

// maxMessageDepth bounds how deep MessageIDs looks: an event's target
// or source is one message down.
const maxMessageDepth = 3

// MessageIDs are the platform ids m holds in fields named as the id
// attributes of a log record are (chat_id, user_id, thread_id, and the
// lists user_ids and chat_ids), its own and those of the messages it
// holds (an event's source or target), for SpanError to take out of the
// text of an error about it.
func MessageIDs(m proto.Message) []string {
	if m == nil {
		return nil
	}
	return messageIDs(nil, m.ProtoReflect(), maxMessageDepth)
}

func messageIDs(ids []string, m protoreflect.Message, depth int) []string {
	if !m.IsValid() || depth == 0 {
		return ids
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.IsList():
			if idListAttrs[string(fd.Name())] {
				for i, list := 0, v.List(); i < list.Len(); i++ {
					ids = appendID(ids, fd.Kind(), list.Get(i))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			ids = messageIDs(ids, v.Message(), depth-1)
		case idAttrs[string(fd.Name())]:
			ids = appendID(ids, fd.Kind(), v)
		}
		return true
	})
	return ids
}

// appendID is ids with v, an id field's value of kind k, when k is a
// string's or a signed 64-bit number's (a Telegram id).
func appendID(ids []string, k protoreflect.Kind, v protoreflect.Value) []string {
	switch k {
	case protoreflect.StringKind:
		return append(ids, v.String())
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return append(ids, strconv.FormatInt(v.Int(), 10))
	}
	return ids
}

// SpanMessageError is SpanError with the ids of m, the message the work
// was about (MessageIDs), as the ids the error may name. It walks m
// only when pseudonyms are on and span is recorded: without them the
// bus's error paths cost what they did before SpanError.
func SpanMessageError(span trace.Span, err error, m proto.Message) {
	if err != nil && spanPseudonyms.Load() != nil && span.IsRecording() {
		SpanError(span, err, MessageIDs(m)...)
		return
	}
	SpanError(span, err)
}
