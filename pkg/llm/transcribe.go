package llm

import (
	"context"
	"io"

	"github.com/openai/openai-go/v3"
)

// DefaultTranscriptionModel is OpenAI's speech-to-text model.
const DefaultTranscriptionModel = "whisper-1"

// Transcribe turns speech into text through the OpenAI-compatible
// /audio/transcriptions endpoint (OpenAI, Groq, local Whisper servers).
// filename's extension tells the server the audio's format. Errors are
// classified as the chat calls' are.
func (o *OpenAI) Transcribe(ctx context.Context, model string, audio io.Reader, filename, mime string) (string, error) {
	if model == "" {
		model = DefaultTranscriptionModel
	}
	resp, err := o.client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(audio, filename, mime), Model: model,
	}, o.auth)
	if err != nil {
		return "", openAIError(ctx, err)
	}
	return resp.Text, nil
}
