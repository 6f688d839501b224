package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// What the official client sends that the agent cannot take is refused
// with OpenAI's error, which the client raises, and nothing runs: a file
// or audio part (as Hermes refuses it, rather than answering without
// it) and more than one choice.
func TestSDKRequestsTheAgentCannotAnswer(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	for _, tt := range []struct {
		name   string
		params openai.ChatCompletionNewParams
		code   string
		param  string
	}{
		{"a file part", openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("summarise this"),
				openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{FileID: openai.String("file-abc")}),
			})}}, "unsupported_content_type", "messages[0].content[1].type"},
		{"an audio part", openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.InputAudioContentPart(openai.ChatCompletionContentPartInputAudioInputAudioParam{Data: "UklGRg==", Format: "wav"}),
			})}}, "unsupported_content_type", "messages[0].content[0].type"},
		{"two choices", openai.ChatCompletionNewParams{Model: "switchboard", N: openai.Int(2),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}, "unsupported_parameter", "n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Chat.Completions.New(ctx, tt.params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != tt.code || apiErr.Param != tt.param || apiErr.Type != "invalid_request_error" {
				t.Fatalf("error %v, want 400 %s at %s", err, tt.code, tt.param)
			}
		})
	}
	// A picture in the Responses API's spelling is a picture here too.
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard", N: openai.Int(1),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("what is it"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/cat.png", Detail: "low"}),
		})}})
	if err != nil || len(resp.Choices) != 1 {
		t.Fatalf("picture: %v", err)
	}
	evs := r.received()
	if len(evs) != 1 || len(evs[0].GetAttachments()) != 1 || evs[0].GetAttachments()[0].GetUrl() != "https://example.com/cat.png" {
		t.Fatalf("published %v: want only the picture's request, with its picture", evs)
	}
}
