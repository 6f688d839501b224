package mattermost

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// errMalformed marks a websocket frame or post that is not what
// Mattermost sends.
var errMalformed = errors.New("malformed mattermost event")

// frame is one websocket message from the server: an event
// ({"event","data","broadcast","seq"}) or the answer to one of the
// client's actions ({"status","seq_reply","error"}).
type frame struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Seq       int64           `json:"seq"`
	Status    string          `json:"status"`
	SeqReply  int64           `json:"seq_reply"`
	Error     json.RawMessage `json:"error"`
	Broadcast struct {
		ChannelID string `json:"channel_id"`
	} `json:"broadcast"`
}

// postedData is a "posted" event's data: the post is a JSON string of
// its own. Its "mentions" (a JSON string of user ids) is not read: the
// server lists there everyone an @channel, @all or @here notified, so
// it cannot tell a post addressed to the bot (see normalize).
type postedData struct {
	Post               string `json:"post"`
	ChannelType        string `json:"channel_type"`
	ChannelDisplayName string `json:"channel_display_name"`
	ChannelName        string `json:"channel_name"`
	SenderName         string `json:"sender_name"`
	TeamID             string `json:"team_id"`
}

// post is the part of a Mattermost post the gateway reads.
type post struct {
	ID        string   `json:"id"`
	CreateAt  int64    `json:"create_at"`
	UpdateAt  int64    `json:"update_at"`
	EditAt    int64    `json:"edit_at"`
	DeleteAt  int64    `json:"delete_at"`
	UserID    string   `json:"user_id"`
	ChannelID string   `json:"channel_id"`
	RootID    string   `json:"root_id"`
	Message   string   `json:"message"`
	Type      string   `json:"type"`
	FileIDs   []string `json:"file_ids"`
	// Props are read for sendProp (findSent) and from_bot/from_webhook
	// (fromProgram); any JSON is taken.
	Props    json.RawMessage `json:"props"`
	Metadata struct {
		Files []fileInfo `json:"files"`
	} `json:"metadata"`
}

// posted is a "posted" event, parsed: the post and what the event says
// of its channel and sender.
type posted struct {
	Post        *post
	ChannelType string
	ChannelName string // the display name
	SenderName  string // without the leading @
	// FromBot: the author is a bot account, or the post came through an
	// incoming webhook (props from_bot, from_webhook; the author's
	// is_bot). Set by the platform before normalize.
	FromBot bool
}

// postProps is the part of a post's props that says a program made it:
// the server sets from_bot ("true") on a bot account's posts and
// from_webhook ("true") on an incoming webhook's, whose author is the
// person who made the webhook.
type postProps struct {
	FromBot     any `json:"from_bot"`
	FromWebhook any `json:"from_webhook"`
}

// fromProgram reports whether the post's props mark it as a bot's or a
// webhook's; props that are not an object say nothing.
func (p *post) fromProgram() bool {
	if len(p.Props) == 0 {
		return false
	}
	var pr postProps
	if err := json.Unmarshal(p.Props, &pr); err != nil {
		return false
	}
	return truthy(pr.FromBot) || truthy(pr.FromWebhook)
}

// truthy reads a prop the server writes as the string "true" (a boolean
// true is taken too).
func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return strings.EqualFold(strings.TrimSpace(v), "true")
	}
	return false
}

// parseFrame reads one websocket message.
func parseFrame(raw []byte) (*frame, error) {
	var f frame
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if f.Event == "" && f.SeqReply == 0 && f.Status == "" {
		return nil, fmt.Errorf("%w: neither an event nor a reply", errMalformed)
	}
	return &f, nil
}

// parsePosted reads a "posted" event's data and the post inside it.
func parsePosted(data json.RawMessage) (*posted, error) {
	var d postedData
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%w: posted data: %v", errMalformed, err)
	}
	if d.Post == "" {
		return nil, fmt.Errorf("%w: posted event without a post", errMalformed)
	}
	p, err := parsePost([]byte(d.Post))
	if err != nil {
		return nil, err
	}
	return &posted{Post: p, ChannelType: d.ChannelType, ChannelName: d.ChannelDisplayName,
		SenderName: strings.TrimPrefix(d.SenderName, "@")}, nil
}

// parsePost reads a post's JSON and checks the ids every post has.
func parsePost(raw []byte) (*post, error) {
	var p post
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("%w: post: %v", errMalformed, err)
	}
	if p.ID == "" || p.ChannelID == "" || p.UserID == "" {
		return nil, fmt.Errorf("%w: post without an id, channel or author", errMalformed)
	}
	return &p, nil
}
