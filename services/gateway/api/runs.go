package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// Hermes's runs API: POST /v1/runs starts a run — one agent turn
// answering one input — and answers at once (202) with its id; GET
// /v1/runs/{id} is its status, GET /v1/runs/{id}/events the stream of its
// events; POST /v1/runs/{id}/approval answers the approval it waits on,
// POST /v1/runs/{id}/steer adds to what it does, POST /v1/runs/{id}/stop
// stops it.
//
// A run's message is a platform message like a chat completion's, whose
// id is the run id. Its turn's replies come back through delivery as any
// other (text deltas, tool steps, the answer's sends), to whichever
// replica, which records them in the run store (runstore.go): a status
// change in the run's record, an event under the run. Stop, approval and
// steer are the chat commands a user would send: /stop, /approve, /deny
// and /steer, as messages of the run's session, whose own replies the
// router answers.

// runChoices are the answers to an approval, as Hermes names them, and
// the command each one is.
var runChoices = map[string]string{
	"once":    "/approve",
	"session": "/approve session",
	"always":  "/approve always",
	"deny":    "/deny",
}

// choiceList is runChoices in Hermes's order.
var choiceList = []string{"once", "session", "always", "deny"}

// choiceAliases are Hermes's other names of "once".
var choiceAliases = map[string]string{"approve": "once", "approved": "once", "allow": "once"}

func (s *Service) runRoutes(mux *routeTable) {
	mux.HandleFunc("GET /v1/capabilities", s.authed(s.capabilities))
	mux.HandleFunc("POST /v1/runs", s.authed(s.createRun))
	mux.HandleFunc("GET /v1/runs/{id}", s.authed(s.getRun))
	mux.HandleFunc("GET /v1/runs/{id}/events", s.authed(s.runEvents))
	mux.HandleFunc("POST /v1/runs/{id}/approval", s.authed(s.runApproval))
	mux.HandleFunc("POST /v1/runs/{id}/steer", s.authed(s.steerRun))
	mux.HandleFunc("POST /v1/runs/{id}/stop", s.authed(s.stopRun))
}

// createRun serves POST /v1/runs.
func (s *Service) createRun(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, err := openai.ParseRun(body)
	if err != nil {
		s.rejectInvalid(w, r, "invalid run request", err)
		return
	}
	identity := identityOf(r)
	session, previous, ok := s.runSession(w, r, identity, req)
	if !ok {
		return
	}
	if previous != nil && !req.InstructionsSent {
		// As Hermes: the instructions of the response it continues.
		req.CarryInstructions(previous.Instructions)
	}
	idemKey := r.Header.Get(HeaderIdempotencyKey)
	id := "run_" + randomHex(16)
	if idemKey != "" {
		// Every attempt with this key is the same run, on any replica.
		sum := sha256.Sum256([]byte("run\x00" + identity + "\x00" + session + "\x00" + idemKey))
		id = "run_" + hex.EncodeToString(sum[:16])
	}
	if session == "" {
		// As Hermes: a run that names no conversation starts one named
		// by its id, which a later run may continue (session_id).
		session = id
	}
	t, ok := s.prepare(w, r, message{input: req.Input, session: session, stream: true, param: "input", received: received})
	if !ok {
		return
	}
	defer t.close()
	t.id, t.ev.EventId, t.ev.MessageId = id, id, id
	if previous != nil && previous.Session != session && previous.Turn != "" {
		// session_id with previous_response_id: as Hermes's _handle_runs,
		// the run takes that response's conversation (its stored
		// conversation_history) and goes on in the session it names,
		// which the router opens as a copy of that conversation up to the
		// response's answer. A session that exists already keeps its own.
		t.ev.ForkFrom = &eventsv1.ForkFrom{SessionKey: previous.SessionKey, TurnId: previous.Turn}
	}
	if !s.checkEvent(w, r, t) {
		return
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	now := unixNow()
	rec := runRecord{Owner: identity, Chat: t.ev.GetSource().GetChatId(), Scope: t.scope, Status: runStatus{
		Object: "hermes.run", RunID: id, Status: runQueued, CreatedAt: now, UpdatedAt: now, SessionID: session, Model: model,
	}}
	if idemKey != "" {
		params := strings.Join([]string{model, session, req.PreviousResponseID}, "\x00")
		sum := sha256.Sum256([]byte(fingerprint(req.Text, req.Attachments, req.Context) + "\x00" + params))
		rec.Request = "run:" + hex.EncodeToString(sum[:16])
	}
	stored, created, err := s.runs.create(r.Context(), rec)
	if err != nil {
		s.log.WarnContext(r.Context(), "record api run failed", "err", err)
		writeUnavailable(w)
		return
	}
	if !created && (stored.Owner != identity || stored.Request != rec.Request) {
		writeError(w, http.StatusConflict, "invalid_request_error", "idempotency_key_conflict", HeaderIdempotencyKey,
			"Idempotency-Key was already used with a different request payload.")
		return
	}
	if created && !s.admitRun(w, r, id) {
		return
	}
	if created || stored.Status.Status == runQueued {
		// A retry publishes too: the attempt that wrote the record may
		// have died before it published (the gateway's seen record and
		// the bus drop a copy).
		deliver := s.rn().DeliverFresh
		if idemKey != "" {
			deliver = s.rn().Deliver
		}
		if _, err := deliver(r.Context(), t.ev); err != nil {
			if created {
				s.forgetRun(r, id)
			}
			s.writeDeliverError(w, r, t, err)
			return
		}
	}
	w.Header().Set(HeaderSession, session)
	w.Header().Set(HeaderHermesSession, session)
	t.echoScope(w)
	status := "started"
	if !created {
		w.Header().Set("Idempotency-Replayed", "true")
		status = stored.Status.Status
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"run_id": id, "status": status, "replayed": !created})
}

// admitRun gives the new run id one of the slots of the runs that go on
// at once, which it holds until it ends. When none is free, as Hermes,
// the run is refused (429 rate_limit_exceeded, Retry-After: 1) and its
// record removed; the request is answered (429, 503) and false returned.
func (s *Service) admitRun(w http.ResponseWriter, r *http.Request, id string) bool {
	slot, err := s.slots.take(r.Context(), id)
	if err == nil && slot > 0 {
		_, _, err = s.runs.change(r.Context(), id, func(rec *runRecord) bool {
			rec.Slot = slot
			return true
		})
	}
	switch {
	case err != nil:
		s.log.WarnContext(r.Context(), "take api run slot failed", "err", err)
		s.forgetRun(r, id)
		writeUnavailable(w)
		return false
	case slot == 0 && s.cfg.MaxConcurrentRuns > 0:
		s.forgetRun(r, id)
		runsRefused.Inc()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "",
			fmt.Sprintf("Too many concurrent runs (max %d)", s.cfg.MaxConcurrentRuns))
		return false
	}
	return true
}

// forgetRun removes the record of a run that will not run, and gives
// back its slot.
func (s *Service) forgetRun(r *http.Request, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	rec, _, found, err := s.runs.read(ctx, id)
	if err == nil && found {
		if err := s.slots.give(ctx, id, rec.Slot); err != nil {
			s.log.WarnContext(ctx, "give back api run slot failed", "err", err)
		}
	}
	if err := s.runs.remove(ctx, id); err != nil {
		s.log.WarnContext(ctx, "forget api run failed", "err", err)
	}
}

// runSession is the conversation a run continues ("" for a new one): the
// body's session_id, else that of previous_response_id, else the
// session header. It answers the request itself (400, 503) and returns
// false when the run names none it can continue. With
// previous_response_id it returns the record of that response too (with
// session_id as well, only when found: the run takes its instructions,
// and its conversation when the session is a new one: createRun).
func (s *Service) runSession(w http.ResponseWriter, r *http.Request, identity string, req *openai.Run) (string, *storedResponse, bool) {
	header, ok := sessionOf(w, r)
	if !ok {
		return "", nil, false
	}
	session, param := header, HeaderSession
	var previous *storedResponse
	switch {
	case req.SessionID != "":
		if !sessionIDPattern.MatchString(req.SessionID) {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_id", "session_id",
				"The session_id must be 1-128 characters of letters, digits, '.', '_' or '-'.")
			return "", nil, false
		}
		session, param = req.SessionID, "session_id"
		if req.PreviousResponseID != "" {
			// As Hermes: the run goes on in the session it names, with the
			// instructions and the conversation of the response it names
			// too; one not found is ignored, as Hermes's run ignores it.
			rec, found, err := s.responses.get(r.Context(), req.PreviousResponseID, identity)
			if err != nil {
				s.log.WarnContext(r.Context(), "read api response failed", "err", err)
				writeUnavailable(w)
				return "", nil, false
			}
			if found {
				previous = &rec
			}
		}
	case req.PreviousResponseID != "":
		rec, found, err := s.responses.get(r.Context(), req.PreviousResponseID, identity)
		if err != nil {
			s.log.WarnContext(r.Context(), "read api response failed", "err", err)
			writeUnavailable(w)
			return "", nil, false
		}
		if !found {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "previous_response_not_found", "previous_response_id",
				fmt.Sprintf("Previous response with id '%s' not found.", openai.Clip(req.PreviousResponseID, 64)))
			return "", nil, false
		}
		session, param, previous = rec.Session, "previous_response_id", &rec
	}
	if header != "" && session != header {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", param,
			fmt.Sprintf("The %s names another conversation than the %s header; send one of them.", param, HeaderSession))
		return "", nil, false
	}
	return session, previous, true
}

// getRun serves GET /v1/runs/{id}.
func (s *Service) getRun(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownRun(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, rec.Status)
}

// runEvents serves GET /v1/runs/{id}/events: the run's events so far,
// then each as it happens, until its last (run.completed, run.failed or
// run.cancelled), after which the stream closes.
func (s *Service) runEvents(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownRun(w, r)
	if !ok {
		return
	}
	id := rec.Status.RunID
	out := startSSE(w, false)
	ended := false
	err := s.runs.watch(r.Context(), id, func(data []byte, ev runEvent) bool {
		out.write("data: " + string(data) + "\n\n")
		ended = ev.ends()
		return !ended
	}, func() bool {
		out.keepalive()
		// A run that ended has its last event: written again, in case
		// its writer died before it could. A run no longer kept ends the
		// stream.
		rec, _, found, err := s.runs.read(r.Context(), id)
		if err == nil && found && terminal(rec.Status.Status) {
			s.endEvent(r.Context(), rec)
		}
		return err != nil || found
	})
	if err != nil {
		s.log.WarnContext(r.Context(), "follow api run failed", "err", err)
		return
	}
	if ended {
		out.write(": stream closed\n\n")
	}
}

// stopRun serves POST /v1/runs/{id}/stop: the run's session gets /stop,
// as a chat user would send it, and the run ends as cancelled when the
// router has answered it. A run that ended already is answered with its
// status.
func (s *Service) stopRun(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownRun(w, r)
	if !ok {
		return
	}
	id := rec.Status.RunID
	var before string
	rec, found, err := s.runs.change(r.Context(), id, func(rec *runRecord) bool {
		before = rec.Status.Status
		if terminal(before) || before == runStopping {
			return false
		}
		rec.Status.Status, rec.Status.LastEvent, rec.Status.Approval = runStopping, "run.stopping", nil
		return true
	})
	switch {
	case err != nil:
		s.log.WarnContext(r.Context(), "record api run stop failed", "err", err)
		writeUnavailable(w)
		return
	case !found:
		writeRunNotFound(w, id)
		return
	case terminal(rec.Status.Status):
		writeJSON(w, http.StatusOK, rec.Status)
		return
	}
	if before != runStopping {
		if _, err := s.rn().DeliverFresh(r.Context(), s.runCommand(rec, id+"_"+runStop+"_"+randomHex(4), "/stop")); err != nil {
			// Nothing will stop it: it runs on as it was.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
			defer cancel()
			if _, _, err := s.runs.change(ctx, id, func(rec *runRecord) bool {
				if rec.Status.Status != runStopping {
					return false
				}
				rec.Status.Status = before
				return true
			}); err != nil {
				s.log.WarnContext(ctx, "record api run stop failed", "err", err)
			}
			s.log.WarnContext(r.Context(), "publish api run stop failed", "err", err)
			writeUnavailable(w)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"run_id": id, "status": runStopping})
}

// steerRun serves POST /v1/runs/{id}/steer: text for the running turn to
// take in without being stopped goes to the run's session as /steer
// <text>, as a chat user would send it; the worker hands it to the model
// after the current tool call (or after the model's answer, as a message
// of its own). As Hermes, only a run that is running is steered (409
// run_not_accepting_steer while it waits, waits for an approval, is
// being stopped or has ended).
func (s *Service) steerRun(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownRun(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	text, err := parseSteer(body)
	if err != nil {
		s.rejectInvalid(w, r, "invalid run steer", err)
		return
	}
	id := rec.Status.RunID
	if rec.Status.Status != runRunning {
		writeError(w, http.StatusConflict, "invalid_request_error", "run_not_accepting_steer", "",
			fmt.Sprintf("Run is %s, not running: it cannot be steered: %s", rec.Status.Status, id))
		return
	}
	msgID := id + "_" + runSteered + "_" + randomHex(4)
	if _, err := s.rn().DeliverFresh(r.Context(), s.runCommand(rec, msgID, "/steer "+text)); err != nil {
		s.log.WarnContext(r.Context(), "publish api run steer failed", "err", err)
		writeUnavailable(w)
		return
	}
	if err := s.runProgress(r.Context(), id, "steer:"+msgID, runEvent{Event: "run.steered", Accepted: true},
		func(*runRecord, *runEvent) {}); err != nil {
		// Sent all the same: only its event is missing.
		s.log.WarnContext(r.Context(), "record api run steer failed", "err", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "hermes.run.steer", "run_id": id, "accepted": true})
}

// steerFields are where a steer body's text may be, as Hermes reads it:
// the first of them that is not empty.
var steerFields = []string{"input", "message", "text"}

// parseSteer reads a steer body: {"input"|"message"|"text": a string, or
// content parts whose text parts are joined by newlines}.
func parseSteer(body []byte) (string, error) {
	var req map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil || dec.More() || req == nil {
		return "", &openai.InvalidError{Msg: "The request body must be a JSON object with an input."}
	}
	empty := &openai.InvalidError{Param: "input", Code: "invalid_steer_input", Msg: "Steer input must be non-empty text."}
	for _, field := range steerFields {
		raw := bytes.TrimSpace(req[field])
		switch string(raw) {
		case "", "null", `""`, "[]", "{}", "false", "0":
			continue // not there, or empty: the next field
		}
		var text string
		if json.Unmarshal(raw, &text) != nil {
			var parts []json.RawMessage
			if json.Unmarshal(raw, &parts) != nil {
				return "", empty
			}
			var texts []string
			for _, p := range parts {
				var part struct {
					Type string `json:"type"`
					Text string `json:"text"`
				}
				if json.Unmarshal(p, &text) == nil {
					texts = append(texts, text)
				} else if json.Unmarshal(p, &part) == nil && (part.Type == "text" || part.Type == "input_text" || part.Type == "output_text") {
					texts = append(texts, part.Text)
				}
			}
			text = strings.Join(texts, "\n")
		}
		if text = openai.PythonStrip(text); text == "" {
			return "", empty
		}
		return text, nil
	}
	return "", empty
}

// runApproval serves POST /v1/runs/{id}/approval: the answer to the
// approval the run waits on goes to its session as the chat command
// (/approve, /approve session, /approve always, /deny).
func (s *Service) runApproval(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownRun(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	choice, err := parseApproval(body)
	if err != nil {
		s.rejectInvalid(w, r, "invalid run approval", err)
		return
	}
	id := rec.Status.RunID
	switch {
	case terminal(rec.Status.Status):
		writeError(w, http.StatusConflict, "invalid_request_error", "approval_not_active", "", "Run has no active approval session: "+id)
		return
	case rec.Status.Status != runApproval:
		writeError(w, http.StatusConflict, "invalid_request_error", "approval_not_pending", "", "Run has no pending approval: "+id)
		return
	}
	// The answer is recorded before it is sent, so that the run's events
	// show it before what the turn does with it.
	msgID := id + "_" + runApproved + "_" + randomHex(4)
	var waiting *runEvent
	if err := s.runProgress(r.Context(), id, "approval:"+msgID, runEvent{Event: "approval.responded", Choice: choice, Resolved: 1},
		func(rec *runRecord, _ *runEvent) {
			if rec.Status.Status == runApproval {
				waiting = rec.Status.Approval
				rec.Status.Status, rec.Status.Approval = runRunning, nil
			}
		}); err != nil {
		s.log.WarnContext(r.Context(), "record api run approval failed", "err", err)
		writeUnavailable(w)
		return
	}
	if _, err := s.rn().DeliverFresh(r.Context(), s.runCommand(rec, msgID, runChoices[choice])); err != nil {
		// Not sent: the run waits on, for an answer sent again.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if _, _, err := s.runs.change(ctx, id, func(rec *runRecord) bool {
			if rec.Status.Status != runRunning || waiting == nil {
				return false
			}
			rec.Status.Status, rec.Status.Approval = runApproval, waiting
			return true
		}); err != nil {
			s.log.WarnContext(ctx, "record api run approval failed", "err", err)
		}
		s.log.WarnContext(r.Context(), "publish api run approval failed", "err", err)
		writeUnavailable(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "hermes.run.approval_response", "run_id": id, "choice": choice, "resolved": 1})
}

// parseApproval reads an approval body: {"choice": once, session, always
// or deny (approve, approved and allow are once)}. Hermes's "all" is
// accepted: one approval waits at a time here.
func parseApproval(body []byte) (string, error) {
	var req struct {
		Choice json.RawMessage `json:"choice"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil || dec.More() {
		return "", &openai.InvalidError{Msg: "The request body must be a JSON object with a choice."}
	}
	var choice string
	_ = json.Unmarshal(req.Choice, &choice)
	choice = strings.ToLower(openai.PythonStrip(choice))
	if alias, ok := choiceAliases[choice]; ok {
		choice = alias
	}
	if _, ok := runChoices[choice]; !ok {
		return "", &openai.InvalidError{Param: "choice", Code: "invalid_approval_choice",
			Msg: "Invalid approval choice; expected one of: " + strings.Join(choiceList, ", ")}
	}
	return choice, nil
}

// runCommand is a command sent in the run's session for it, as its
// client: /stop, /approve, /deny.
func (s *Service) runCommand(rec runRecord, id, text string) *eventsv1.MessageReceived {
	return &eventsv1.MessageReceived{
		EventId: id, MessageId: id,
		Source: &eventsv1.SessionSource{Platform: PlatformName, Account: s.cfg.Account, ChatId: rec.Chat, ChatType: "dm", UserId: rec.Owner, UserIdAlt: rec.Scope},
		Text:   text, SentAt: timestamppb.Now(), TransportAuthenticated: true, ClientSessionId: rec.Status.SessionID, AnswerOnly: true,
	}
}

// ownRun reads the run the URL names, if it is the client's. It answers
// the request itself (404, 503) otherwise.
func (s *Service) ownRun(w http.ResponseWriter, r *http.Request) (runRecord, bool) {
	id := r.PathValue("id")
	rec, found, err := s.runs.get(r.Context(), id, identityOf(r))
	if err != nil {
		s.log.WarnContext(r.Context(), "read api run failed", "err", err)
		writeUnavailable(w)
		return runRecord{}, false
	}
	if !found {
		writeRunNotFound(w, id)
		return runRecord{}, false
	}
	return rec, true
}

func writeRunNotFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "invalid_request_error", "run_not_found", "", "Run not found: "+openai.Clip(id, 64))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// What the turns of runs send: each send delivery makes for a run's
// message (or for a command sent for it) changes the run.

// ToolProgress records a step of a run's tool call, and shows it to the
// streams waiting for the turn's answer (toolPiece).
func (s *Service) ToolProgress(ctx context.Context, req *deliveryv1.SendRequested) error {
	if err := s.runSend(ctx, req); err != nil {
		return err
	}
	keyed, plain := splitIDs(req.GetInputMessageIds())
	for _, id := range keyed {
		s.answers.tool(id, req.GetToolStep())
	}
	return s.route(ctx, plain, req, toolPiece(req))
}

// runSend applies a send to the runs among its input messages.
func (s *Service) runSend(ctx context.Context, req *deliveryv1.SendRequested) error {
	for _, id := range req.GetInputMessageIds() {
		run, command, ok := runMessage(id)
		if !ok {
			continue
		}
		if err := s.runStep(ctx, run, command, req); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) runStep(ctx context.Context, run, command string, req *deliveryv1.SendRequested) error {
	key := req.GetIdempotencyKey()
	if key == "" {
		key = randomHex(12)
	}
	switch command {
	case runStop:
		// The router's answer to /stop: the turn was stopped (or had
		// ended, which the run then says already).
		if req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND && req.GetFinal() {
			return s.endRun(ctx, run, req, true)
		}
		return nil
	case runApproved:
		return nil // approval.responded was recorded when it was sent
	case runSteered:
		// The router's notice, or — for a steer the turn could no longer
		// take in — the answer of the next turn it was queued for, which
		// is the session's, not the run's.
		return nil
	}
	switch req.GetOp() {
	case deliveryv1.SendOp_SEND_OP_STREAM_DELTA:
		if req.GetText() == "" {
			return nil
		}
		return s.runDelta(ctx, run, key, req.GetText(), req.GetStreamRestart())
	case deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS:
		ev, change := toolEvent(req.GetToolStep())
		if ev.Event == "" {
			return nil
		}
		return s.runProgress(ctx, run, key, ev, change)
	case deliveryv1.SendOp_SEND_OP_SEND:
		if req.GetFinal() {
			return s.endRun(ctx, run, req, false)
		}
		if strings.HasPrefix(req.GetTurnId(), "notice:") {
			return nil // a busy acknowledgement: not the answer
		}
		media := mediaLinks(req.GetAttachments())
		_, _, err := s.runs.change(ctx, run, func(rec *runRecord) bool {
			if terminal(rec.Status.Status) || rec.added(key) {
				return false
			}
			rec.Answer += req.GetText()
			if media != "" {
				rec.Media = append(rec.Media, media)
			}
			rec.Sent = append(rec.Sent, key)
			return true
		})
		return err
	}
	return nil
}

// runDelta records a text delta of a run and writes its event: the text
// streamed since the last break is kept, so that the run's end streams
// what its output adds to it (endRun). A break (restart: the text of a
// later model call follows) starts the answer again, as a chat
// completion's stream does (relay).
func (s *Service) runDelta(ctx context.Context, run, key, text string, restart bool) error {
	ev := runEvent{Event: "message.delta", Delta: text, Timestamp: unixNow()}
	rec, found, err := s.runs.change(ctx, run, func(rec *runRecord) bool {
		rec.fold()
		if terminal(rec.Status.Status) || rec.Deltas.counted(key) {
			return false
		}
		if rec.Status.Status == runQueued {
			rec.Status.Status = runRunning
		}
		rec.Deltas.count(key, text, restart)
		return true
	})
	if err != nil || !found || terminal(rec.Status.Status) {
		return err
	}
	return s.runs.emitAt(ctx, run, rec.Deltas.eventKey(run, key), ev)
}

// runProgress records an event of a run that goes on: the run is
// running from its first event, change changes its record for the
// event, and the event is written unless the run has ended. (Text
// deltas are runDelta's.)
func (s *Service) runProgress(ctx context.Context, run, key string, ev runEvent, change func(*runRecord, *runEvent)) error {
	ev.Timestamp = unixNow()
	rec, found, err := s.runs.change(ctx, run, func(rec *runRecord) bool {
		st := &rec.Status
		if terminal(st.Status) {
			return false
		}
		if st.Status == runQueued {
			st.Status = runRunning
		}
		change(rec, &ev)
		st.LastEvent = ev.Event
		return true
	})
	if err != nil || !found || terminal(rec.Status.Status) {
		return err
	}
	return s.runs.emit(ctx, run, key, ev)
}

// toolEvent is the event of a tool call's step and how it changes the
// run: a call's start time is kept for its duration, and a call waiting
// for an approval parks the run (waiting_for_approval) until its next
// step.
func toolEvent(step *deliveryv1.ToolStep) (runEvent, func(*runRecord, *runEvent)) {
	call, name := step.GetToolCallId(), step.GetToolName()
	resume := func(rec *runRecord) {
		if rec.Status.Status == runApproval {
			rec.Status.Status, rec.Status.Approval = runRunning, nil
		}
	}
	switch step.GetPhase() {
	case "started":
		detail := step.GetDetail()
		return runEvent{Event: "tool.started", Tool: name, ToolCallID: call, Preview: &detail}, func(rec *runRecord, ev *runEvent) {
			resume(rec)
			if rec.Tools == nil {
				rec.Tools = map[string]float64{}
			}
			rec.Tools[call] = ev.Timestamp
		}
	case "finished", "failed":
		return runEvent{Event: "tool.completed", Tool: name, ToolCallID: call, Error: step.GetPhase() == "failed"}, func(rec *runRecord, ev *runEvent) {
			resume(rec)
			d := 0.0
			if began, ok := rec.Tools[call]; ok {
				d = float64(int64((ev.Timestamp-began)*1000)) / 1000
				delete(rec.Tools, call)
			}
			ev.Duration = &d
		}
	case "awaiting_approval":
		return runEvent{Event: "approval.request", Tool: name, ToolCallID: call, Description: step.GetDetail(), Choices: choiceList}, func(rec *runRecord, ev *runEvent) {
			if rec.Status.Status != runStopping {
				approval := *ev
				approval.RunID = rec.Status.RunID
				rec.Status.Status, rec.Status.Approval = runApproval, &approval
			}
		}
	}
	return runEvent{}, nil
}

// endRun ends a run with the final send of its answer, or with the
// router's answer to the /stop sent for it (stopped). A run being
// stopped ends as cancelled whichever comes first; one that ended stays
// as it ended. Its last event is written (again, as the same event, when
// the send is delivered again).
func (s *Service) endRun(ctx context.Context, run string, req *deliveryv1.SendRequested, stopped bool) error {
	// The deltas the run's events hold: a replica from before the
	// deltas were counted writes theirs without counting them, and one
	// from before the tally's mark rewrites the record without what was
	// counted there (deltaTally.countedAll).
	var deltas []string
	if !stopped && req.GetErrorCode() == "" {
		var err error
		if deltas, err = s.runs.deltaEvents(ctx, run); err != nil {
			return err
		}
	}
	rec, found, err := s.runs.change(ctx, run, func(rec *runRecord) bool {
		st := &rec.Status
		if terminal(st.Status) {
			return false
		}
		rec.fold()
		switch {
		case stopped || st.Status == runStopping:
			st.Status = runCancelled
		case req.GetErrorCode() != "":
			st.Status, st.Error = runFailed, failureMessage(req.GetText())
		default:
			text, media := rec.Answer+req.GetText(), rec.Media
			if m := mediaLinks(req.GetAttachments()); m != "" {
				media = append(media, m)
			}
			// The output adds the links to the media its sends carried
			// after the answer's text, as a chat completion's answer.
			out := withMedia(text, media)
			// The deltas stream the answer up to the worker's last delta
			// interval; the final send carries the rest, which the last
			// delta streams. An answer that is not what was streamed
			// (the turn ran again after its worker died mid-stream),
			// or one with a delta event that was not counted (a replica
			// from before the count wrote it), streams only its links:
			// the output says the whole answer. Delta events that are
			// gone (expired, evicted) do not matter.
			rest, continues := rec.Deltas.rest(text)
			if !continues || !rec.Deltas.countedAll(run, deltas) {
				rest = ""
			}
			rec.Tail = rest + strings.TrimPrefix(out, text)
			st.Status, st.Output = runCompleted, &out
			if u := req.GetUsage(); u != nil {
				st.Usage = &runUsage{InputTokens: u.GetPromptTokens(), OutputTokens: u.GetCompletionTokens(),
					TotalTokens: u.GetPromptTokens() + u.GetCompletionTokens()}
			}
		}
		st.LastEvent, st.Approval = "run."+st.Status, nil
		rec.Answer, rec.Sent, rec.Tools, rec.Media = "", nil, nil, nil
		rec.Deltas = deltaTally{}
		return true
	})
	if err != nil || !found || !terminal(rec.Status.Status) {
		return err
	}
	if err := s.slots.give(ctx, run, rec.Slot); err != nil {
		// Not given back: the next run to find every slot held takes it
		// over (its run has ended).
		s.log.WarnContext(ctx, "give back api run slot failed", "err", err)
	}
	return s.lastEvents(ctx, rec)
}

// endEvent writes the last event of a run that ended, if it is not
// written yet.
func (s *Service) endEvent(ctx context.Context, rec runRecord) {
	if err := s.lastEvents(ctx, rec); err != nil {
		s.log.WarnContext(ctx, "record api run end failed", "err", err)
	}
}

// lastEvents writes the events a run that ended ends with, each once:
// what its output adds after the text its deltas carried, as the last
// text delta (the deltas add up to the output, as a chat completion's
// stream does), then its last event. Whoever writes them — the send that ended the run,
// that send delivered again, a follower of a run whose writer stopped —
// writes them in that order, so the links never come after the end,
// and both at the time the run ended, so the last delta's timestamp is
// not after the end's either.
func (s *Service) lastEvents(ctx context.Context, rec runRecord) error {
	run := rec.Status.RunID
	if rec.Status.Status == runCompleted && rec.Tail != "" {
		// Under the key it had when it carried the links alone, so that
		// a record a replica of that time ended streams it once.
		tail := runEvent{Event: "message.delta", Delta: rec.Tail, Timestamp: rec.Status.UpdatedAt}
		if err := s.runs.emit(ctx, run, "media", tail); err != nil {
			return err
		}
	}
	return s.runs.emit(ctx, run, "end", lastEvent(rec.Status))
}

// lastEvent is the event that ends a run in st: run.completed (with
// output and usage), run.failed (with error) or run.cancelled.
func lastEvent(st runStatus) runEvent {
	ev := runEvent{Event: "run." + st.Status, Timestamp: st.UpdatedAt}
	switch st.Status {
	case runCompleted:
		ev.Output, ev.Usage = st.Output, st.Usage
		if ev.Usage == nil {
			ev.Usage = &runUsage{}
		}
	case runFailed:
		ev.Error = st.Error
	}
	return ev
}
