package sessionkey

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// ErrBadInput is returned, wrapped, by RunKeyTool when at least one input
// line could not be turned into a key.
var ErrBadInput = errors.New("bad input lines")

// maxLineBytes bounds one input line, so a runaway producer cannot make the
// tool hold gigabytes. Longer lines are reported as bad and skipped.
const maxLineBytes = 16 << 20

// RunKeyTool is the core of the operator tool `switchboard route key`.
//
// It reads one JSON request per line from in:
//
//	{"source": {<SessionSource, snake_case as in Hermes; guild_id aliases scope_id>},
//	 "group_sessions_per_user": bool, "thread_sessions_per_user": bool,
//	 "profile": string|null}
//
// Missing or null flags take their defaults (DefaultOptions). For each input
// line it writes exactly one line to out, in order: the key, or an empty
// line when the input line is bad; the reason goes to errOut as
// "line N: …". Blank lines count as bad, so that output line N always
// answers input line N. Lines may be of any length up to 16 MiB.
//
// It returns an error wrapping ErrBadInput if any line was bad, or the
// error that stopped reading in or writing out.
func RunKeyTool(in io.Reader, out, errOut io.Writer) error {
	return runKeyTool(in, out, errOut, maxLineBytes)
}

func runKeyTool(in io.Reader, out, errOut io.Writer, maxLine int) error {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	lines, bad := 0, 0
	for {
		line, tooLong, readErr := readLine(r, maxLine)
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			_ = w.Flush()
			return fmt.Errorf("read line %d: %w", lines+1, readErr)
		}
		if errors.Is(readErr, io.EOF) && len(line) == 0 && !tooLong {
			break // end of input, or the newline ending the last line
		}
		lines++

		var key string
		var err error
		if tooLong {
			err = fmt.Errorf("line longer than %d bytes", maxLine)
		} else {
			key, err = keyForLine(line)
		}
		if err != nil {
			bad++
			if _, werr := fmt.Fprintf(errOut, "line %d: %v\n", lines, err); werr != nil {
				_ = w.Flush()
				return fmt.Errorf("write error for line %d: %w", lines, werr)
			}
		}
		w.WriteString(key)
		if err := w.WriteByte('\n'); err != nil {
			return fmt.Errorf("write key for line %d: %w", lines, err)
		}
		// Answer at once when no more input is waiting, so the tool works
		// interactively; batch the writes otherwise.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return fmt.Errorf("write key for line %d: %w", lines, err)
			}
		}
		if errors.Is(readErr, io.EOF) {
			break
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write keys: %w", err)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d lines: %w", bad, lines, ErrBadInput)
	}
	return nil
}

// readLine reads one line without its "\n" (and a "\r" before it). A line
// longer than max is consumed to its end and reported as tooLong with no
// content. err is io.EOF when the input ended on this line.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 { // room for "\r\n"
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > max {
			return nil, true, err
		}
		return line, false, err
	}
}

// keyForLine parses one request line and builds its key.
func keyForLine(line []byte) (string, error) {
	src, opts, err := ParseRequest(line)
	if err != nil {
		return "", err
	}
	return Build(src, opts), nil
}

// request is one line of RunKeyTool input.
type request struct {
	Source                *sourceJSON `json:"source"`
	GroupSessionsPerUser  *bool       `json:"group_sessions_per_user"`
	ThreadSessionsPerUser *bool       `json:"thread_sessions_per_user"`
	Profile               *string     `json:"profile"`
}

// sourceJSON is a SessionSource as Hermes serialises it. Ids may be JSON
// strings or integers (Hermes stores Telegram chat ids as numbers); null
// counts as absent. Unknown fields (message_id, auto_thread_created, …) are
// ignored.
type sourceJSON struct {
	Platform            jsonID `json:"platform"`
	Account             jsonID `json:"account"`
	ChatID              jsonID `json:"chat_id"`
	ChatName            jsonID `json:"chat_name"`
	ChatType            jsonID `json:"chat_type"`
	UserID              jsonID `json:"user_id"`
	UserName            jsonID `json:"user_name"`
	UserIDAlt           jsonID `json:"user_id_alt"`
	ChatIDAlt           jsonID `json:"chat_id_alt"`
	ThreadID            jsonID `json:"thread_id"`
	ParentChatID        jsonID `json:"parent_chat_id"`
	ScopeID             jsonID `json:"scope_id"`
	GuildID             jsonID `json:"guild_id"`
	ProspectiveThreadID jsonID `json:"prospective_thread_id"`
	ChatTopic           jsonID `json:"chat_topic"`
	IsBot               *bool  `json:"is_bot"`
}

// ParseRequest parses one RunKeyTool input line into a source and the
// options to build its key with. The line must hold exactly one JSON object
// with a "source" object naming a platform.
func ParseRequest(line []byte) (*eventsv1.SessionSource, Options, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, Options{}, errors.New("parse request: empty line")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	var req request
	if err := dec.Decode(&req); err != nil {
		return nil, Options{}, fmt.Errorf("parse request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, Options{}, errors.New("parse request: data after the JSON object")
	}
	if req.Source == nil {
		return nil, Options{}, errors.New("parse request: missing \"source\" object")
	}
	if req.Source.Platform == "" {
		return nil, Options{}, errors.New("parse request: source has no platform")
	}

	opts := DefaultOptions()
	if req.GroupSessionsPerUser != nil {
		opts.GroupSessionsPerUser = *req.GroupSessionsPerUser
	}
	if req.ThreadSessionsPerUser != nil {
		opts.ThreadSessionsPerUser = *req.ThreadSessionsPerUser
	}
	if req.Profile != nil {
		opts.Profile = *req.Profile
	}
	return req.Source.proto(), opts, nil
}

// proto converts s to the bus type, resolving the guild_id alias: a
// non-empty scope_id wins, else guild_id.
func (s *sourceJSON) proto() *eventsv1.SessionSource {
	scope := s.ScopeID
	if scope == "" {
		scope = s.GuildID
	}
	return &eventsv1.SessionSource{
		Platform:            string(s.Platform),
		Account:             string(s.Account),
		ChatId:              string(s.ChatID),
		ChatName:            string(s.ChatName),
		ChatType:            string(s.ChatType),
		UserId:              string(s.UserID),
		UserName:            string(s.UserName),
		UserIdAlt:           string(s.UserIDAlt),
		ChatIdAlt:           string(s.ChatIDAlt),
		ThreadId:            string(s.ThreadID),
		ParentChatId:        string(s.ParentChatID),
		ScopeId:             string(scope),
		ProspectiveThreadId: string(s.ProspectiveThreadID),
		ChatTopic:           string(s.ChatTopic),
		IsBot:               s.IsBot != nil && *s.IsBot,
	}
}

// jsonID is a string field that also accepts a JSON integer (kept as its
// literal digits, like Python's str(int)) and null (empty).
type jsonID string

// UnmarshalJSON implements json.Unmarshaler.
func (id *jsonID) UnmarshalJSON(data []byte) error {
	switch {
	case string(data) == "null":
		*id = ""
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("decode id string: %w", err)
		}
		*id = jsonID(s)
		return nil
	case isJSONInteger(data):
		*id = jsonID(data)
		return nil
	default:
		return fmt.Errorf("want a string or an integer, got %.40s", data)
	}
}

// isJSONInteger reports whether data is a JSON number without fraction or
// exponent. encoding/json has already checked it is valid JSON.
func isJSONInteger(data []byte) bool {
	if len(data) > 0 && data[0] == '-' {
		data = data[1:]
	}
	if len(data) == 0 {
		return false
	}
	for _, c := range data {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
