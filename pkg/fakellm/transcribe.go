package fakellm

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Transcription is a speech-to-text request the fake received.
type Transcription struct {
	Model    string
	FileName string
	Audio    []byte
	// Streamed: the body came without a Content-Length (chunked), as a
	// client sends what it writes as it reads it, not a body it built
	// whole first.
	Streamed bool
}

// handleTranscription answers OpenAI's /audio/transcriptions: the
// "speech" of audio that is UTF-8 text is that text (so tests choose what
// a voice message says), anything else "(unintelligible audio, N bytes)".
// A file named with "fail" in it gets a 400, as a format the server cannot
// read does.
func (s *Server) handleTranscription(w http.ResponseWriter, r *http.Request) {
	if !s.checkKey(r) {
		writeFailure(w, "openai", &Failure{Status: http.StatusUnauthorized})
		return
	}
	if err := r.ParseMultipartForm(maxBody); err != nil {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "invalid multipart body: " + err.Error()})
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "file is required"})
		return
	}
	defer func() { _ = f.Close() }()
	audio, err := io.ReadAll(f)
	if err != nil {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "unreadable file"})
		return
	}
	t := Transcription{Model: r.FormValue("model"), FileName: hdr.Filename, Audio: audio, Streamed: r.ContentLength < 0}
	if t.Model == "" {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "model is required"})
		return
	}
	if s.cfg.MaxRecorded >= 0 {
		s.mu.Lock()
		s.transcriptions = append(s.transcriptions, t)
		s.mu.Unlock()
	}
	if bytes.Contains([]byte(hdr.Filename), []byte("fail")) {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "Invalid file format."})
		return
	}
	text := "(unintelligible audio, " + strconv.Itoa(len(audio)) + " bytes)"
	if utf8.Valid(audio) {
		text = string(audio)
	}
	w.Header().Set("Content-Type", "application/json")
	b := append(appendString(append(make([]byte, 0, len(text)+16), `{"text":`...), text), '}')
	_, _ = w.Write(b)
}

// Transcriptions returns the speech-to-text requests received so far.
func (s *Server) Transcriptions() []Transcription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Transcription(nil), s.transcriptions...)
}
