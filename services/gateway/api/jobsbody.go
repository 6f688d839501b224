package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// The bodies of Hermes's jobs API (POST /api/jobs, PATCH
// /api/jobs/{id}): a JSON object of the fields of `hermes cron`.

// maxJobBody bounds a jobs API body: a prompt is at most 16 KiB.
const maxJobBody = 64 << 10

// maxJobName is the longest name the jobs API takes, in characters.
const maxJobName = cron.MaxNameRunes

// errJobBody marks a body the jobs API refuses (400); its message says
// what is wrong.
var errJobBody = errors.New("invalid job body")

// jobBody is a parsed create or update body; nil fields were absent (or
// null).
type jobBody struct {
	Name, Schedule, Prompt, Deliver *string
	Repeat                          *int
	Enabled                         *bool
}

// unsupportedJobFields are Hermes's job fields that Switchboard's jobs do
// not have: a body that sets one is refused rather than run without it.
var unsupportedJobFields = []string{"skills", "skill", "model", "provider", "base_url", "script", "no_agent",
	"context_from", "enabled_toolsets", "workdir", "profile"}

// updateFields are the fields PATCH takes (Hermes's whitelist).
var updateFields = []string{"name", "schedule", "prompt", "deliver", "skills", "skill", "repeat", "enabled"}

// parseJobCreate reads a POST /api/jobs body. As Hermes, name and
// schedule are required; deliver defaults to local (an API client has no
// chat to answer in later); repeat is a positive count or null.
func parseJobCreate(body []byte) (jobBody, error) {
	j, fields, err := parseJobBody(body)
	if err != nil {
		return jobBody{}, err
	}
	// As Hermes's (body.get("name") or "").strip(), and the schedule's:
	// the job takes them stripped.
	for _, p := range []*string{j.Name, j.Schedule} {
		if p != nil {
			*p = openai.PythonStrip(*p)
		}
	}
	switch {
	case j.Name == nil || *j.Name == "":
		return jobBody{}, fmt.Errorf("%w: Name is required", errJobBody)
	case j.Schedule == nil || *j.Schedule == "":
		return jobBody{}, fmt.Errorf("%w: Schedule is required", errJobBody)
	case j.Prompt == nil || openai.PythonStrip(*j.Prompt) == "":
		return jobBody{}, fmt.Errorf("%w: Prompt is required", errJobBody)
	case fields["enabled"] && j.Enabled != nil && !*j.Enabled:
		return jobBody{}, fmt.Errorf("%w: a job is created enabled; pause it after", errJobBody)
	}
	return j, nil
}

// parseJobUpdate reads a PATCH /api/jobs/{id} body: the fields of
// Hermes's whitelist, at least one; others are ignored as Hermes does.
func parseJobUpdate(body []byte) (jobBody, error) {
	j, fields, err := parseJobBody(body)
	if err != nil {
		return jobBody{}, err
	}
	n := 0
	for _, f := range updateFields {
		if fields[f] {
			n++
		}
	}
	if n == 0 {
		return jobBody{}, fmt.Errorf("%w: No valid fields to update", errJobBody)
	}
	if j.Name != nil && openai.PythonStrip(*j.Name) == "" {
		return jobBody{}, fmt.Errorf("%w: name must not be empty", errJobBody)
	}
	if j.Schedule != nil && openai.PythonStrip(*j.Schedule) == "" {
		return jobBody{}, fmt.Errorf("%w: schedule must not be empty", errJobBody)
	}
	return j, nil
}

// parseJobBody decodes the fields both bodies share and says which keys
// the object has.
func parseJobBody(body []byte) (jobBody, map[string]bool, error) {
	if len(body) > maxJobBody {
		return jobBody{}, nil, fmt.Errorf("%w: the body is larger than %d bytes", errJobBody, maxJobBody)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return jobBody{}, nil, fmt.Errorf("%w: the body must be a JSON object", errJobBody)
	}
	fields := make(map[string]bool, len(raw))
	for k, v := range raw {
		fields[k] = !isNull(v)
	}
	var j jobBody
	var err error
	for _, f := range []struct {
		name string
		dst  **string
	}{{"name", &j.Name}, {"schedule", &j.Schedule}, {"prompt", &j.Prompt}, {"deliver", &j.Deliver}} {
		if *f.dst, err = stringField(raw, f.name); err != nil {
			return jobBody{}, nil, err
		}
	}
	if j.Name != nil && utf8.RuneCountInString(openai.PythonStrip(*j.Name)) > maxJobName {
		return jobBody{}, nil, fmt.Errorf("%w: Name must be ≤ %d characters", errJobBody, maxJobName)
	}
	if j.Prompt != nil && len(*j.Prompt) > cron.MaxPromptBytes {
		return jobBody{}, nil, fmt.Errorf("%w: Prompt must be ≤ %d bytes", errJobBody, cron.MaxPromptBytes)
	}
	if v, ok := raw["repeat"]; ok && !isNull(v) {
		var n json.Number
		if t := bytes.TrimSpace(v); t[0] == '"' || json.Unmarshal(t, &n) != nil {
			return jobBody{}, nil, fmt.Errorf("%w: Repeat must be a positive integer", errJobBody)
		}
		i, err := n.Int64()
		if err != nil || i < 1 || i > 1_000_000 {
			return jobBody{}, nil, fmt.Errorf("%w: Repeat must be a positive integer", errJobBody)
		}
		r := int(i)
		j.Repeat = &r
	}
	if v, ok := raw["enabled"]; ok && !isNull(v) {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return jobBody{}, nil, fmt.Errorf("%w: enabled must be true or false", errJobBody)
		}
		j.Enabled = &b
	}
	for _, f := range unsupportedJobFields {
		if v, ok := raw[f]; ok && !emptyValue(v) {
			return jobBody{}, nil, fmt.Errorf("%w: %s is not supported by Switchboard's cron jobs; leave it out", errJobBody, f)
		}
	}
	return j, fields, nil
}

// stringField is the string at key (nil when absent or null).
func stringField(raw map[string]json.RawMessage, key string) (*string, error) {
	v, ok := raw[key]
	if !ok || isNull(v) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return nil, fmt.Errorf("%w: %s must be a string", errJobBody, key)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return nil, fmt.Errorf("%w: %s must be text", errJobBody, key)
	}
	return &s, nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// emptyValue: null, false, "", [] or {} — what a dashboard sends for a
// field it leaves unset.
func emptyValue(v json.RawMessage) bool {
	switch string(bytes.Join(bytes.Fields(v), nil)) {
	case "null", "false", `""`, "[]", "{}":
		return true
	}
	return false
}
