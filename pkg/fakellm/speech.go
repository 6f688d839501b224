package fakellm

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"unicode/utf8"
)

// Speech is a text-to-speech request the fake received.
type Speech struct {
	Model  string
	Voice  string
	Format string
	Input  string
}

// speechFormats are /audio/speech's response formats and the media
// types the fake answers them with.
var speechFormats = map[string]string{
	"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
	"flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm",
}

// handleSpeech answers OpenAI's /audio/speech: audio of the asked
// format whose length follows the input's (a real Ogg/Opus file for
// opus: Opus head and tags, then one 20 ms frame of silence per
// character, up to a page's 255; the other formats carry their real
// magic numbers around silence). A missing model, voice or input, an
// input over 4096 characters or an unknown format gets OpenAI's 400;
// FailSpeech injects failures.
func (s *Server) handleSpeech(w http.ResponseWriter, r *http.Request) {
	if !s.checkKey(r) {
		writeFailure(w, "openai", &Failure{Status: http.StatusUnauthorized})
		return
	}
	var req struct {
		Model          string          `json:"model"`
		Input          string          `json:"input"`
		Voice          json.RawMessage `json:"voice"`
		ResponseFormat string          `json:"response_format"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "invalid JSON body: " + err.Error()})
		return
	}
	var voice string
	if err := json.Unmarshal(req.Voice, &voice); err != nil {
		var custom struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(req.Voice, &custom)
		voice = custom.ID
	}
	format := req.ResponseFormat
	if format == "" {
		format = "mp3"
	}
	sp := Speech{Model: req.Model, Voice: voice, Format: format, Input: req.Input}
	if s.cfg.MaxRecorded >= 0 {
		s.mu.Lock()
		s.speeches = append(s.speeches, sp)
		s.mu.Unlock()
	}
	mt, known := speechFormats[format]
	switch {
	case sp.Model == "":
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "model is required"})
		return
	case sp.Voice == "":
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "voice is required"})
		return
	case sp.Input == "":
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "input is required"})
		return
	case utf8.RuneCountInString(sp.Input) > 4096:
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "input is longer than 4096 characters"})
		return
	case !known:
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "invalid response_format " + format})
		return
	}
	s.mu.Lock()
	var fail *Failure
	if len(s.speechFails) > 0 {
		f := s.speechFails[0].f
		fail = &f
		if s.speechFails[0].n--; s.speechFails[0].n <= 0 {
			s.speechFails = s.speechFails[1:]
		}
	}
	s.mu.Unlock()
	if fail != nil {
		writeFailure(w, "openai", fail)
		return
	}
	frames := min(max(utf8.RuneCountInString(sp.Input), 1), 255)
	var audio []byte
	switch format {
	case "opus":
		audio = OggOpus(frames)
	case "mp3":
		// MPEG-1 Layer III frames, 128 kb/s at 44.1 kHz: 417 bytes each.
		for range frames {
			f := make([]byte, 417)
			copy(f, []byte{0xFF, 0xFB, 0x90, 0x64})
			audio = append(audio, f...)
		}
	case "wav":
		data := make([]byte, frames*960)
		audio = append([]byte("RIFF"), binary.LittleEndian.AppendUint32(nil, uint32(36+len(data)))...)
		audio = append(audio, "WAVEfmt "...)
		audio = binary.LittleEndian.AppendUint32(audio, 16)
		audio = binary.LittleEndian.AppendUint16(audio, 1)     // PCM
		audio = binary.LittleEndian.AppendUint16(audio, 1)     // mono
		audio = binary.LittleEndian.AppendUint32(audio, 24000) // Hz
		audio = binary.LittleEndian.AppendUint32(audio, 48000) // bytes a second
		audio = binary.LittleEndian.AppendUint16(audio, 2)
		audio = binary.LittleEndian.AppendUint16(audio, 16)
		audio = append(audio, "data"...)
		audio = binary.LittleEndian.AppendUint32(audio, uint32(len(data)))
		audio = append(audio, data...)
	case "flac":
		audio = append([]byte("fLaC"), make([]byte, frames*8)...)
	case "aac":
		for range frames {
			audio = append(audio, 0xFF, 0xF1, 0x60, 0x40, 0x01, 0x7F, 0xFC, 0x00)
		}
	default: // pcm
		audio = make([]byte, frames*960)
	}
	w.Header().Set("Content-Type", mt)
	_, _ = w.Write(audio)
}

// FailSpeech makes the next n /audio/speech requests fail with f.
func (s *Server) FailSpeech(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.speechFails = append(s.speechFails, pendingFailure{n: n, f: f})
}

// Speeches returns the text-to-speech requests received so far.
func (s *Server) Speeches() []Speech {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Speech(nil), s.speeches...)
}

// OggOpus is a small valid Ogg/Opus file (RFC 7845): a page with the
// OpusHead header, one with OpusTags, and one holding frames 20 ms
// frames of silence (1 to 255), so a player or a chat platform that
// reads the container finds what a voice message holds.
func OggOpus(frames int) []byte {
	frames = min(max(frames, 1), 255)
	head := append([]byte("OpusHead"), 1, 1)             // version 1, mono
	head = binary.LittleEndian.AppendUint16(head, 312)   // pre-skip
	head = binary.LittleEndian.AppendUint32(head, 48000) // input rate
	head = append(head, 0, 0, 0)                         // gain 0, mapping family 0
	const vendor = "fakellm"
	tags := append([]byte("OpusTags"), binary.LittleEndian.AppendUint32(nil, uint32(len(vendor)))...)
	tags = append(tags, vendor...)
	tags = binary.LittleEndian.AppendUint32(tags, 0) // no comments
	silence := []byte{0xF8, 0xFF, 0xFE}              // CELT 20 ms silence frame
	var out []byte
	out = append(out, oggPage(0x02, 0, 0, [][]byte{head})...)
	out = append(out, oggPage(0x00, 0, 1, [][]byte{tags})...)
	packets := make([][]byte, frames)
	for i := range packets {
		packets[i] = silence
	}
	return append(out, oggPage(0x04, uint64(312+frames*960), 2, packets)...)
}

// oggPage is one Ogg page of stream 1 holding packets (each under 255
// bytes), its CRC computed as the format defines it.
func oggPage(flags byte, granule uint64, seq uint32, packets [][]byte) []byte {
	p := append([]byte("OggS"), 0, flags)
	p = binary.LittleEndian.AppendUint64(p, granule)
	p = binary.LittleEndian.AppendUint32(p, 1) // serial
	p = binary.LittleEndian.AppendUint32(p, seq)
	crcAt := len(p)
	p = binary.LittleEndian.AppendUint32(p, 0)
	p = append(p, byte(len(packets)))
	for _, pk := range packets {
		p = append(p, byte(len(pk)))
	}
	for _, pk := range packets {
		p = append(p, pk...)
	}
	binary.LittleEndian.PutUint32(p[crcAt:], oggCRC(p))
	return p
}

// oggCRC is Ogg's CRC-32: polynomial 0x04c11db7, no reflection, no
// final xor, initial value 0.
func oggCRC(b []byte) uint32 {
	var crc uint32
	for _, c := range b {
		crc ^= uint32(c) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04c11db7
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
