package bluebubbles

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxText is the most characters one message takes (Hermes's limit).
const maxText = 4000

// maxGUIDs bounds the address → chat guid cache.
const maxGUIDs = 1000

// formatted is the text as iMessage shows it: the model's Markdown as
// plain text, as Hermes strips it, unless the request is plain already.
func formatted(req *deliveryv1.SendRequested) string {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return strings.TrimSpace(req.GetText())
	}
	return strings.TrimSpace(markup.Plain.Convert(req.GetText()))
}

// remember keeps a DM's chat guid for sends to its address.
func (p *Platform) remember(address, guid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.guids) >= maxGUIDs {
		clear(p.guids)
	}
	p.guids[address] = guid
}

// chatGUID is the chat guid of a chat id: a guid (it has a ";") as it
// is, an address through the DMs this replica saw it write from, else
// through the server's chats (POST /api/v1/chat/query): its DM, never a
// group it is in.
func (p *Platform) chatGUID(ctx context.Context, chatID string) (string, error) {
	chatID = strings.TrimSpace(chatID)
	if chatID == "" {
		return "", platform.Permanent(errors.New("no bluebubbles chat"))
	}
	if strings.Contains(chatID, ";") {
		return chatID, nil
	}
	p.mu.Lock()
	g, ok := p.guids[chatID]
	p.mu.Unlock()
	if ok {
		return g, nil
	}
	var chats []struct {
		GUID           string `json:"guid"`
		ChatIdentifier string `json:"chatIdentifier"`
		Participants   []struct {
			Address string `json:"address"`
		} `json:"participants"`
	}
	body := map[string]any{"limit": 1000, "offset": 0, "with": []string{"participants"}, "sort": "lastmessage"}
	if err := p.api.call(ctx, http.MethodPost, "/api/v1/chat/query", body, &chats); err != nil {
		return "", classify(fmt.Errorf("find the chat of %s: %w", redact(chatID), err))
	}
	found := ""
	for _, c := range chats {
		// Only a DM: an address is a person, and a group the person is
		// in would show the answer to everyone in it.
		if !strings.Contains(c.GUID, ";-;") {
			continue
		}
		hit := c.ChatIdentifier == chatID || dmChatID(c.GUID, "", "") == chatID
		for _, pt := range c.Participants {
			hit = hit || strings.TrimSpace(pt.Address) == chatID
		}
		if hit {
			found = c.GUID
			break
		}
	}
	if found == "" {
		return "", platform.Permanent(fmt.Errorf("%w: %s", ErrChatNotFound, redact(chatID)))
	}
	p.remember(chatID, found)
	return found, nil
}

// sentMessage is the REST API's answer to a send: the message.
type sentMessage struct {
	GUID string `json:"guid"`
}

// Send posts one text message (POST /api/v1/message/text with chatGuid,
// message, method and a tempGuid, the idempotency key), or the
// attachments and then the text (sendAttachments). With the Private API
// helper, a reply quotes the message it answers (selectedMessageGuid), as
// Hermes's, and a text to an address no chat has starts a DM with it
// (newChat); otherwise the message goes out through AppleScript. An
// attempt that ends without knowing whether the message went out is
// settled by the next one (settle.go).
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	text := formatted(req)
	if text == "" && len(req.GetAttachments()) == 0 {
		return "", platform.Permanent(errors.New("empty message"))
	}
	if n := utf8.RuneCountInString(text); n > maxText {
		return "", platform.Permanent(fmt.Errorf("text is %d characters, bluebubbles takes %d", n, maxText))
	}
	since := firstTry(ctx, time.Now())
	chatID := strings.TrimSpace(req.GetTarget().GetChatId())
	guid, err := p.chatGUID(ctx, chatID)
	if err != nil {
		if errors.Is(err, ErrChatNotFound) && len(req.GetAttachments()) == 0 && p.privateAPI.Load() && looksLikeAddress(chatID) {
			return p.newChat(ctx, chatID, tempGUID(req), text)
		}
		return "", err
	}
	if len(req.GetAttachments()) > 0 {
		return p.sendAttachments(ctx, req, guid, since)
	}
	return p.sendText(ctx, req, guid, text, since)
}

// tempGUID is the send's tempGuid: its idempotency key.
func tempGUID(req *deliveryv1.SendRequested) string {
	if k := req.GetIdempotencyKey(); k != "" {
		return k
	}
	return fmt.Sprintf("temp-%d", time.Now().UnixNano())
}

// sendText posts text to the chat guid.
func (p *Platform) sendText(ctx context.Context, req *deliveryv1.SendRequested, guid, text string, since time.Time) (string, error) {
	a := attempt{chat: guid, temp: tempGUID(req), since: since, match: textIs(text)}
	if id, err := p.settled(ctx, a); id != "" || err != nil {
		return id, err
	}
	body := map[string]any{"chatGuid": guid, "message": text, "tempGuid": a.temp, "method": "apple-script"}
	if r := req.GetTarget().GetReplyToMessageId(); r != "" && p.privateAPI.Load() {
		body["method"], body["selectedMessageGuid"], body["partIndex"] = "private-api", r, 0
	}
	var out sentMessage
	if err := p.api.call(ctx, http.MethodPost, "/api/v1/message/text", body, &out); err != nil {
		return p.unsure(ctx, a, err)
	}
	if out.GUID == "" {
		return "", errors.New("bluebubbles answered a send without the message's guid")
	}
	return out.GUID, nil
}

// Edit: delivery does not stream to BlueBubbles (Hermes's choice: an edit
// needs the Private API on macOS 13+ and breaks on newer ones).
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("bluebubbles does not edit sent messages: %w", platform.ErrUnsupported)
}

// Delete: not done (unsend needs the Private API).
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("bluebubbles does not unsend messages: %w", platform.ErrUnsupported)
}

// Typing starts the typing bubble (POST /api/v1/chat/{guid}/typing),
// which needs the Private API helper; without it this does nothing, as
// in Hermes.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	if !p.privateAPI.Load() {
		return nil
	}
	guid, err := p.chatGUID(ctx, req.GetTarget().GetChatId())
	if err != nil {
		return err
	}
	return classify(p.api.call(ctx, http.MethodPost, "/api/v1/chat/"+url.PathEscape(guid)+"/typing", nil, nil))
}

// readReceiptComponent is the switchboard_panics_total component of a
// panic in a read receipt's goroutine.
const readReceiptComponent = "gateway_read_receipt"

// readReceipts bounds the read receipts in flight; beyond it they are
// dropped.
var readReceipts = make(chan struct{}, 8)

// markRead marks a chat read in the background (POST
// /api/v1/chat/{guid}/read), as Hermes does once a message arrived; a
// failure is only logged. A panic in it is recovered, logged and counted
// (switchboard_panics_total{component="gateway_read_receipt"}): on this
// goroutine it would end the process.
func (p *Platform) markRead(src *eventsv1.SessionSource) {
	guid := src.GetChatId()
	if !strings.Contains(guid, ";") {
		guid = src.GetChatIdAlt()
	}
	if guid == "" {
		return
	}
	select {
	case readReceipts <- struct{}{}:
	default:
		return
	}
	go func() {
		defer func() { <-readReceipts }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := panics.Recover(p.log, readReceiptComponent, func() error {
			return p.api.call(ctx, http.MethodPost, "/api/v1/chat/"+url.PathEscape(guid)+"/read", nil, nil)
		}, "platform", "bluebubbles", "chat", guid)
		if err != nil && !errors.Is(err, panics.ErrPanicked) {
			p.log.Debug("bluebubbles read receipt failed", "err", err)
		}
	}()
}
