package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// branch is Hermes's /branch [title] (/fork): the chat continues in a
// copy of its conversation, which stays in /sessions for /resume. It is
// refused mid-turn (refusedMidTurn), as Hermes refuses it; the copy is
// one transaction that also advances the generation, so a turn that
// started after the check is fenced as by /new.
func (s *Service) branch(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(gen int64, text string) error { return s.notice(ctx, m, gen, text, "command") }
	var title string
	if args != "" {
		var problem string
		if title, problem = cleanTitle(args); problem != "" {
			return reply(sess.Generation, problem)
		}
	}
	b, err := s.store.Branch(ctx, m.key, title, maxTitle)
	if errors.Is(err, sessionstore.ErrNothingToBranch) {
		return reply(sess.Generation, "No conversation to branch — send a message first.")
	}
	if err != nil {
		return err
	}
	resets.WithLabelValues("branch").Inc()
	return reply(b.Session.Generation, fmt.Sprintf("⑂ Branched to **%s** (%s copied)\nOriginal: `%s`\nBranch: `%s`\nUse `/resume` to switch back to the original.",
		b.Session.Title, plural(b.Messages, "message"), b.ParentID, b.Session.ID))
}
