package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// DefaultTranscriptionModel is OpenAI's speech-to-text model.
const DefaultTranscriptionModel = "whisper-1"

// errUploadDone ends the writing of an upload whose request is over.
var errUploadDone = errors.New("transcription request ended")

// audioReader remembers the error reading the audio failed with, as
// opposed to the request's.
type audioReader struct {
	r   io.Reader
	err error
}

func (a *audioReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if err != nil && err != io.EOF {
		a.err = err
	}
	return n, err
}

// Transcribe turns speech into text through the OpenAI-compatible
// /audio/transcriptions endpoint (OpenAI, Groq, local Whisper servers).
// filename's extension tells the server the audio's format. Errors are
// classified as the chat calls' are.
//
// The audio is streamed: the multipart body is written through a pipe as
// the request sends it (chunked), so at most a buffer of the audio is in
// memory, however long the recording (the SDK's own call builds the
// whole body in memory first). A body read once cannot be sent again,
// which costs nothing: the SDK's retries are off (NewOpenAI). An error
// reading audio ends the upload and is returned as it is, wrapped.
func (o *OpenAI) Transcribe(ctx context.Context, model string, audio io.Reader, filename, mime string) (string, error) {
	if model == "" {
		model = DefaultTranscriptionModel
	}
	src := &audioReader{r: audio}
	params := openai.AudioTranscriptionNewParams{File: openai.File(src, filename, mime), Model: model}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	written := make(chan struct{})
	go func() {
		defer close(written)
		err := params.MarshalMultipartTo(mw)
		if err == nil {
			err = mw.Close()
		}
		_ = pw.CloseWithError(err) // nil: the request reads EOF
	}()
	var resp *openai.AudioTranscriptionNewResponseUnion
	err := o.client.Post(ctx, "audio/transcriptions", pr, &resp, o.auth,
		option.WithHeader("Content-Type", mw.FormDataContentType()), option.WithMaxRetries(0))
	// The request is over: a write still blocked on the pipe (the
	// server answered before reading all of it) fails and ends, so
	// audio is not read after Transcribe returns.
	_ = pr.CloseWithError(errUploadDone)
	<-written
	if src.err != nil {
		return "", fmt.Errorf("transcription upload: read audio: %w", src.err)
	}
	if err != nil {
		return "", openAIError(ctx, err)
	}
	if resp == nil {
		return "", errors.New("transcription: empty answer")
	}
	return resp.Text, nil
}
