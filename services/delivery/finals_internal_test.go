package delivery

import (
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// finalDigest names what a chat shows: copies of one final agree, even a
// later attempt's republished copy without the deciding attempt's token
// usage (the runtime footer's source), and finals that show otherwise
// differ.
func TestFinalDigest(t *testing.T) {
	text := func(seq int64, s string, format deliveryv1.TextFormat, usage *deliveryv1.TokenUsage) *repliesv1.ReplyEvent {
		return &repliesv1.ReplyEvent{Seq: seq, Body: &repliesv1.ReplyEvent_FinalText{FinalText: &repliesv1.FinalText{Text: s, Format: format, Usage: usage}}}
	}
	errorEv := func(seq int64, code, msg string) *repliesv1.ReplyEvent {
		return &repliesv1.ReplyEvent{Seq: seq, Body: &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{Code: code, Message: msg}}}
	}
	usage := &deliveryv1.TokenUsage{PromptTokens: 120, CompletionTokens: 30}
	md := deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN
	answer := text(2, "the answer", md, usage)
	for _, tc := range []struct {
		name string
		a, b *repliesv1.ReplyEvent
		same bool
	}{
		{"a copy", answer, text(2, "the answer", md, usage), true},
		{"republished without its usage", answer, text(2, "the answer", md, nil), true},
		{"another seq", answer, text(3, "the answer", md, usage), false},
		{"another text", answer, text(2, "the answer!", md, usage), false},
		{"another format", answer, text(2, "the answer", deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, usage), false},
		{"an error with the answer's text", answer, errorEv(2, "", "the answer"), false},
		{"an error's copy", errorEv(3, "interrupted", "Please send it again."), errorEv(3, "interrupted", "Please send it again."), true},
		{"another error code", errorEv(3, "interrupted", "x"), errorEv(3, "timeout", "x"), false},
		{"text split otherwise between code and message", errorEv(3, "ab", "c"), errorEv(3, "a", "bc"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if same := string(finalDigest(tc.a)) == string(finalDigest(tc.b)); same != tc.same {
				t.Errorf("digests equal = %v, want %v", same, tc.same)
			}
		})
	}
}
