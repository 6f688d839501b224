package telegram

import (
	"errors"
	"strconv"

	"github.com/go-telegram/bot"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// A group upgraded to a supergroup (made public, given topics, grown past
// a basic group's bounds) gets a new chat id, and the old one is closed:
// Telegram refuses a send to it with 400 "group chat was upgraded to a
// supergroup chat" and parameters.migrate_to_chat_id, the new id. The
// answer of a turn begun before the upgrade, and any later send that
// names the old chat (a cron job's, a home channel's), is sent to the
// supergroup instead, once Telegram named it, rather than lost as a
// permanent failure. The new id is kept (moves) so that later sends to
// the old chat go straight to the supergroup, and so are the messages
// sent there in the old chat's place, so that their edits (a streamed
// answer's) and deletes, which name the old chat, follow them. A message
// the old group had is not looked for in the supergroup (its ids are
// the supergroup's own, and the same id there is another message): its
// edit stays refused. Kept in memory, by the replica that learnt it; any
// other learns it from Telegram's refusal the same way.

// moved is what the gateway learnt of upgraded groups.
type moved struct {
	chats map[string]string // old chat id → supergroup's
	msgs  map[string]bool   // "<old chat>/<message id>" sent to the supergroup instead
	older map[string]bool   // msgs before it reached maxMovedMessages
}

// migratedTo returns the supergroup that Telegram's refusal err names
// (migrate_to_chat_id), or "".
func migratedTo(err error) string {
	var mig *bot.MigrateError
	if errors.As(err, &mig) && mig.MigrateToChatID != 0 {
		return strconv.FormatInt(int64(mig.MigrateToChatID), 10)
	}
	return ""
}

// movedTo is the supergroup chat was upgraded to, if the gateway learnt
// it, or "".
func (p *Platform) movedTo(chat string) string {
	p.movedMu.Lock()
	defer p.movedMu.Unlock()
	return p.moved.chats[chat]
}

// move keeps that chat was upgraded to supergroup to.
func (p *Platform) move(chat, to string) {
	p.movedMu.Lock()
	defer p.movedMu.Unlock()
	if p.moved.chats == nil {
		p.moved.chats = map[string]string{}
	}
	if p.moved.chats[chat] != to {
		p.log.Info("telegram group upgraded to a supergroup; sending to it", "chat_id", chat, "to", to)
	}
	p.moved.chats[chat] = to
}

// maxMovedMessages bounds the messages kept as sent to a supergroup in
// an old group's place: at most twice it are kept, the newest.
const maxMovedMessages = 10000

// sentMoved keeps that message id, sent in the place of a message to
// chat, is in chat's supergroup.
func (p *Platform) sentMoved(chat, id string) {
	p.movedMu.Lock()
	defer p.movedMu.Unlock()
	if p.moved.msgs == nil || len(p.moved.msgs) >= maxMovedMessages {
		// Bounded: only the sends that still named an old group (a turn
		// begun before its upgrade, a cron job's) add to it; past the
		// bound the oldest are forgotten (their edits refused as before
		// the fix), the newest kept: a streamed answer's message, still
		// being edited, is among them.
		p.moved.older, p.moved.msgs = p.moved.msgs, map[string]bool{}
	}
	p.moved.msgs[chat+"/"+id] = true
}

// movedMessage is the supergroup holding message id that names chat, if
// the gateway sent it there in chat's place, or "".
func (p *Platform) movedMessage(chat, id string) string {
	p.movedMu.Lock()
	defer p.movedMu.Unlock()
	if k := chat + "/" + id; !p.moved.msgs[k] && !p.moved.older[k] {
		return ""
	}
	return p.moved.chats[chat]
}

// inChat is req with its target's chat id to. The message it replies to
// and its thread are the old group's, whose ids in the supergroup are
// other messages': they are left out.
func inChat(req *deliveryv1.SendRequested, to string) *deliveryv1.SendRequested {
	out := proto.Clone(req).(*deliveryv1.SendRequested)
	if out.Target == nil {
		out.Target = &deliveryv1.Target{}
	}
	out.Target.ChatId = to
	out.Target.ReplyToMessageId, out.Target.ThreadId = "", ""
	return out
}

// followMigration runs op for req: in the supergroup its chat was
// upgraded to when that is known, and once more there when Telegram
// answers that it was. It returns op's error and the chat it went to.
func (p *Platform) followMigration(req *deliveryv1.SendRequested, op func(*deliveryv1.SendRequested) error) (string, error) {
	old := req.GetTarget().GetChatId()
	chat, in := old, req
	if to := p.movedTo(old); to != "" {
		chat, in = to, inChat(req, to)
	}
	err := op(in)
	if to := migratedTo(err); to != "" && to != chat {
		p.move(old, to)
		chat = to
		err = op(inChat(req, to))
	}
	return chat, err
}
