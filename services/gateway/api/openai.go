package api

import (
	"encoding/json"
	"net/http"
	"strings"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// apiError is OpenAI's error body.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	if status == http.StatusConflict {
		// The gateway's conflicts (a deleted response's or an expired
		// Idempotency-Key, a response that cannot be continued, a run's
		// state) are the same for every attempt, while the OpenAI SDKs
		// retry a 409 (OpenAI's lock timeouts) unless told not to.
		w.Header().Set("X-Should-Retry", "false")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody(typ, code, param, msg))
}

// errorBody is OpenAI's error object; an empty code or param is null.
func errorBody(typ, code, param, msg string) apiError {
	body := apiError{Error: apiErrorBody{Message: msg, Type: typ}}
	if code != "" {
		body.Error.Code = &code
	}
	if param != "" {
		body.Error.Param = &param
	}
	return body
}

// turnFailure is how the API answers a turn that failed with a worker
// error code (ReplyError.code), in OpenAI's terms.
type turnFailure struct {
	status int
	typ    string
	code   string
}

// turnFailures maps the worker's error codes; any other is internal_error.
// None is worth the OpenAI SDKs' own retry (writeTurnError): the turn
// ran, so a retry is the message again, run again, tools and all.
var turnFailures = map[string]turnFailure{
	// The provider's 429 outlasted the worker's retries (llm.max_attempts,
	// honouring Retry-After up to 2 minutes): the SDK's next try, within
	// seconds, meets the same limit after running the message's steps
	// again.
	"rate_limited":     {http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded"},
	"quota":            {http.StatusTooManyRequests, "insufficient_quota", "insufficient_quota"},
	"context_overflow": {http.StatusBadRequest, "invalid_request_error", "context_length_exceeded"},
	"auth":             {http.StatusBadGateway, "server_error", "upstream_auth_error"},
	// A 5xx or a dropped connection the worker retried already, or a tool
	// call cut at the output limit on every try: the same again.
	"provider": {http.StatusBadGateway, "server_error", "upstream_error"},
	// A model call that stalled for llm.call_timeout (10 minutes): a
	// retry waits as long again, with the message run twice.
	"timeout": {http.StatusGatewayTimeout, "server_error", "timeout"},
	// A turn /stop or /new ended, or that failed on every attempt: a
	// retry would run what was stopped, or fail again.
	"interrupted": {http.StatusServiceUnavailable, "server_error", "interrupted"},
}

func failureOf(code string) turnFailure {
	if f, ok := turnFailures[code]; ok {
		return f
	}
	return turnFailure{http.StatusInternalServerError, "server_error", "internal_error"}
}

// failureMessage is the user-facing explanation without the warning sign
// chat platforms show it with.
func failureMessage(text string) string {
	if m := strings.TrimSpace(strings.TrimPrefix(text, "⚠️")); m != "" {
		return m
	}
	return "The agent could not answer."
}

// turnErrorBody is the error object of a turn that failed with code,
// explained by text.
func turnErrorBody(code, text string) apiError {
	f := failureOf(code)
	return errorBody(f.typ, f.code, "", failureMessage(text))
}

// writeTurnError answers a request whose turn failed. The answer says
// not to send the request again on its own (X-Should-Retry: false,
// which the OpenAI SDKs honour before retrying a 429 or a 5xx, twice by
// default): the turn took the message and ran, so a retry would be the
// message again — another turn, its tools run again, the message twice
// in a conversation's history — where the worker has retried the model
// already. A retry with the same Idempotency-Key gets this answer again.
// The client decides when to ask again (the error says why).
func writeTurnError(w http.ResponseWriter, code, text string) {
	f := failureOf(code)
	w.Header().Set("X-Should-Retry", "false")
	writeError(w, f.status, f.typ, f.code, "", failureMessage(text))
}

// Response shapes.
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usage              `json:"usage"`
}

type completionChoice struct {
	Index        int               `json:"index"`
	Message      completionMessage `json:"message"`
	FinishReason string            `json:"finish_reason"`
}

type completionMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	// Usage is set on the last chunk of a stream that asked for it
	// (stream_options.include_usage), whose choices are empty.
	Usage *usage `json:"usage,omitempty"`
}

// usageOf is a turn's token usage as OpenAI reports it.
func usageOf(u *deliveryv1.TokenUsage) usage {
	return usage{PromptTokens: int(u.GetPromptTokens()), CompletionTokens: int(u.GetCompletionTokens()),
		TotalTokens: int(u.GetPromptTokens() + u.GetCompletionTokens())}
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

// model is a /v1/models entry, with the legacy fields Hermes's carries
// too (permission, root, parent).
type model struct {
	ID         string  `json:"id"`
	Object     string  `json:"object"`
	Created    int64   `json:"created"`
	OwnedBy    string  `json:"owned_by"`
	Permission []any   `json:"permission"`
	Root       string  `json:"root"`
	Parent     *string `json:"parent"`
}
