package llm

import (
	"context"
	"fmt"
	"io"

	"github.com/openai/openai-go/v3"
)

// Text-to-speech defaults: Hermes's OpenAI TTS provider's model and
// voice, and Opus, the format Telegram plays as a voice message.
const (
	DefaultSpeechModel  = "gpt-4o-mini-tts"
	DefaultSpeechVoice  = "alloy"
	DefaultSpeechFormat = "opus"
)

// MaxSpeechInput is the most characters /audio/speech takes in one
// request (OpenAI's limit).
const MaxSpeechInput = 4096

// maxSpeechBytes bounds the audio read back: 4096 characters of speech
// are a few minutes, a few MB in any of the formats.
const maxSpeechBytes = 32 << 20

// SpeechMIME is the media type of audio in an /audio/speech
// response_format.
func SpeechMIME(format string) string {
	switch format {
	case "opus":
		return "audio/ogg" // Opus in an Ogg container
	case "aac":
		return "audio/aac"
	case "flac":
		return "audio/flac"
	case "wav":
		return "audio/wav"
	case "pcm":
		return "audio/L16" // raw 24 kHz 16-bit mono
	}
	return "audio/mpeg"
}

// Speak turns text into speech through the OpenAI-compatible
// /audio/speech endpoint (OpenAI, and the servers that copy it) and
// returns the audio and its media type (SpeechMIME of format: servers
// name Opus in Ogg variously). Empty model, voice or format take
// the defaults. Errors are classified as the chat calls' are.
func (o *OpenAI) Speak(ctx context.Context, model, voice, format, text string) ([]byte, string, error) {
	if model == "" {
		model = DefaultSpeechModel
	}
	if voice == "" {
		voice = DefaultSpeechVoice
	}
	if format == "" {
		format = DefaultSpeechFormat
	}
	resp, err := o.client.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{
		Input: text, Model: model,
		Voice:          openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String(voice)},
		ResponseFormat: openai.AudioSpeechNewParamsResponseFormat(format),
	}, o.auth)
	if err != nil {
		return nil, "", openAIError(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	audio, err := io.ReadAll(io.LimitReader(resp.Body, maxSpeechBytes+1))
	if err != nil {
		return nil, "", &Error{Class: Server, Err: fmt.Errorf("read speech: %w", err)}
	}
	if len(audio) > maxSpeechBytes {
		return nil, "", &Error{Class: BadRequest, Err: fmt.Errorf("speech larger than %d bytes", maxSpeechBytes)}
	}
	if len(audio) == 0 {
		return nil, "", &Error{Class: Server, Err: fmt.Errorf("empty speech (status %d)", resp.StatusCode)}
	}
	return audio, SpeechMIME(format), nil
}
