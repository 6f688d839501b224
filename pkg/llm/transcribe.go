package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// DefaultTranscriptionModel is OpenAI's speech-to-text model.
const DefaultTranscriptionModel = "whisper-1"

// DefaultTranscriptionTimeout bounds one transcription: Hermes's, whose
// speech-to-text clients (tools/transcription_tools.py, _transcribe_openai
// and _transcribe_groq) give a request 30 s and retry none.
const DefaultTranscriptionTimeout = 30 * time.Second

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

// exactReader yields what r does, size bytes, and fails when r has more
// or fewer: the upload's Content-Length was computed from size.
type exactReader struct {
	r          io.Reader
	left, size int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if int64(len(p)) > e.left+1 {
		p = p[:e.left+1] // one more, to find the audio longer than it said
	}
	n, err := e.r.Read(p)
	if int64(n) > e.left {
		n, e.left = int(e.left), 0
		return n, fmt.Errorf("audio longer than its %d bytes", e.size)
	}
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, fmt.Errorf("audio shorter than its %d bytes (%d missing)", e.size, e.left)
	}
	return n, err
}

// envelopeSize is the size of params' multipart body, written with
// boundary, without its file's bytes.
func envelopeSize(params openai.AudioTranscriptionNewParams, filename, mime, boundary string) (int64, error) {
	var n countWriter
	mw := multipart.NewWriter(&n)
	if err := mw.SetBoundary(boundary); err != nil {
		return 0, err
	}
	params.File = openai.File(&audioReader{r: strings.NewReader("")}, filename, mime)
	if err := params.MarshalMultipartTo(mw); err != nil {
		return 0, err
	}
	if err := mw.Close(); err != nil {
		return 0, err
	}
	return int64(n), nil
}

// countWriter counts the bytes written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// Transcribe turns speech into text through the OpenAI-compatible
// /audio/transcriptions endpoint (OpenAI, Groq, local Whisper servers).
// filename's extension tells the server the audio's format. Errors are
// classified as the chat calls' are.
//
// The audio is streamed: the multipart body is written through a pipe as
// the request sends it, so at most a buffer of the audio is in
// memory, however long the recording (the SDK's own call builds the
// whole body in memory first). A body read once cannot be sent again,
// which costs nothing: the SDK's retries are off (NewOpenAI). An error
// reading audio ends the upload and is returned as it is, wrapped.
//
// Audio that says how many bytes it has left (a Len method, as
// strings.Reader, bytes.Reader or a stored attachment of known size) is
// sent with a Content-Length, and must yield exactly that many; other
// audio is sent chunked, which some self-hosted servers refuse.
func (o *OpenAI) Transcribe(ctx context.Context, model string, audio io.Reader, filename, mime string) (string, error) {
	if model == "" {
		model = DefaultTranscriptionModel
	}
	src := &audioReader{r: audio}
	params := openai.AudioTranscriptionNewParams{File: openai.File(src, filename, mime), Model: model}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	opts := []option.RequestOption{o.auth,
		option.WithHeader("Content-Type", mw.FormDataContentType()), option.WithMaxRetries(0)}
	if sized, ok := audio.(interface{ Len() int }); ok {
		// Its size known, the upload says its length: servers that take
		// no chunked request body (some self-hosted Whisper servers)
		// refuse one without (411) or read it as empty.
		size := int64(sized.Len())
		length, err := envelopeSize(params, filename, mime, mw.Boundary())
		if err != nil {
			return "", fmt.Errorf("transcription upload: %w", err)
		}
		length += size
		src.r = &exactReader{r: audio, left: size, size: size}
		opts = append(opts, option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			req.ContentLength = length
			return next(req)
		}))
	}
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
	err := o.client.Post(ctx, "audio/transcriptions", pr, &resp, opts...)
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
