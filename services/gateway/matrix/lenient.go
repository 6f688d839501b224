package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// A homeserver's answer is one JSON document holding every event since
// the token; decoded whole (mautrix's FullSyncRequest, Messages), one
// event that does not decode (a number where a string is due, content
// that is not an object) fails the answer, the token never moves past
// it, and the gateway asks for the same answer again and again with the
// rooms deaf. So the answers are read as raw JSON and, when they do not
// decode, decoded again without the events that do not (each rejected:
// logged, counted), the token moving on past them.

// badEvent reports one event left out of an answer.
type badEvent func(raw json.RawMessage, err error)

// syncLenient is FullSyncRequest, one undecodable event costing only
// itself.
// The long poll is bounded by ctx (Connect's deadline: its timeout and
// a grace), not by the HTTP client's overall timeout: mautrix's client
// cuts every request at 180 s, so a sync_timeout over about 150 s
// (up to 5m is taken) failed each quiet poll, and the gateway
// reconnected again and again.
func (p *Platform) syncLenient(ctx context.Context, req mautrix.ReqSync, bad badEvent) (*mautrix.RespSync, error) {
	hc := *p.cli.Client
	hc.Timeout = 0
	body, err := p.cli.MakeFullRequest(ctx, mautrix.FullRequest{
		Method:      http.MethodGet,
		URL:         p.cli.BuildURLWithQuery(mautrix.ClientURLPath{"v3", "sync"}, req.BuildQuery()),
		MaxAttempts: 1,
		Client:      &hc,
	})
	if err != nil {
		return nil, err
	}
	var resp mautrix.RespSync
	if err := decodeLenient(body, &resp, bad); err != nil {
		return nil, fmt.Errorf("sync answer: %w", err)
	}
	return &resp, nil
}

// messagesLenient is Messages, one undecodable event costing only itself.
func (p *Platform) messagesLenient(ctx context.Context, rid id.RoomID, from, to string, dir mautrix.Direction, limit int, bad badEvent) (*mautrix.RespMessages, error) {
	query := map[string]string{"dir": string(dir), "limit": strconv.Itoa(limit)}
	if from != "" {
		query["from"] = from
	}
	if to != "" {
		query["to"] = to
	}
	body, err := p.cli.MakeFullRequest(ctx, mautrix.FullRequest{
		Method: http.MethodGet,
		URL:    p.cli.BuildURLWithQuery(mautrix.ClientURLPath{"v3", "rooms", rid, "messages"}, query),
	})
	if err != nil {
		return nil, err
	}
	var resp mautrix.RespMessages
	if err := decodeLenient(body, &resp, bad); err != nil {
		return nil, fmt.Errorf("messages answer: %w", err)
	}
	return &resp, nil
}

// decodeLenient decodes body into v. When it does not decode, every
// event that does not decode on its own (an element of an "events",
// "chunk" or "state" list, at any depth, that is no event.Event) is
// handed to bad and left out, and what remains is decoded; an answer
// that still does not decode is an error.
func decodeLenient(body []byte, v any, bad badEvent) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return err
	}
	dropped := 0
	doc = dropBadEvents(doc, "", bad, &dropped)
	if dropped == 0 {
		return err
	}
	clean, merr := json.Marshal(doc)
	if merr != nil {
		return err
	}
	return json.Unmarshal(clean, v)
}

// eventLists are the keys whose list holds events.
var eventLists = map[string]bool{"events": true, "chunk": true, "state": true}

func dropBadEvents(v any, key string, bad badEvent, dropped *int) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = dropBadEvents(x, k, bad, dropped)
		}
	case []any:
		if !eventLists[key] {
			for i, x := range t {
				t[i] = dropBadEvents(x, "", bad, dropped)
			}
			return t
		}
		kept := t[:0]
		for _, x := range t {
			raw, err := json.Marshal(x)
			if err == nil {
				var ev event.Event
				if err = json.Unmarshal(raw, &ev); err == nil {
					kept = append(kept, x)
					continue
				}
			}
			*dropped++
			bad(raw, err)
		}
		return kept
	}
	return v
}
