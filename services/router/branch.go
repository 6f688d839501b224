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
	var title string
	if args != "" {
		var problem string
		if title, problem = cleanTitle(args); problem != "" {
			return s.notice(ctx, m, sess.Generation, problem, "command")
		}
	}
	// Once per inbound event: a redelivery answers again, and copies nothing.
	return s.once(ctx, m, "branch", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		b, err := st.Branch(ctx, m.key, title, maxTitle)
		if errors.Is(err, sessionstore.ErrNothingToBranch) {
			return "No conversation to branch — send a message first.", sess.Generation, nil
		}
		if err != nil {
			return "", 0, err
		}
		resets.WithLabelValues("branch").Inc()
		return fmt.Sprintf("⑂ Branched to **%s** (%s copied)\nOriginal: `%s`\nBranch: `%s`\nUse `/resume` to switch back to the original.",
			b.Session.Title, plural(b.Messages, "message"), b.ParentID, b.Session.ID), b.Session.Generation, nil
	})
}
