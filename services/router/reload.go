package router

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// Hermes's /reload-skills (gateway/run.py _handle_reload_skills_command,
// agent/skill_commands.py reload_skills): skills.dirs is scanned again
// and the answer lists the skills added and removed, and how many there
// are. Hermes is one process; here every process that holds skills
// must scan: the replica that got the command scans, announces the
// reload in the SKILLS bucket (pkg/skill) with what its scan found, and
// answers from it; every router replica and the Telegram and Discord
// gateways follow the bucket (the gateways refresh their platform's
// command menu). A replica that was down or re-watching reads the
// announcement when its watch replays it; one that starts scans anyway.

// skillsKV opens the bucket of skill reload announcements.
func (s *Service) skillsKV(ctx context.Context) (jetstream.KeyValue, error) {
	return skill.OpenBucket(ctx, s.bus.JetStream(), s.topo)
}

// followSkills scans the skills again for each reload another process
// announces, until ctx ends (no skills: nothing to follow).
func (s *Service) followSkills(ctx context.Context) error {
	if s.skills == nil {
		return nil
	}
	kv, err := s.skillsKV(ctx)
	if err != nil {
		return err
	}
	return s.skills.Follow(ctx, kv)
}

// reloadSkillsCommand answers /reload-skills, exactly once per inbound
// event (once). The replica scans skills.dirs, then announces the reload
// with the event's id and what its scan changed for the chat's platform
// (skill.Library.ReloadAnnounced), and only then holds the new skills: a
// failed announcement changes nothing anywhere and is answered in
// Hermes's words. When skills changed, Hermes's one-shot note waits for
// the session's next turn that sends the model a message
// (sessionstore.SetSkillsNote, TakesSkillsNote: a /undo's or a
// /compress's turn leaves it waiting), in the same transaction as the
// answer.
//
// That transaction can fail after the announcement (Postgres down
// before the commit): every replica holds the new skills by then, so a
// scan on the redelivery would find nothing new. The redelivery, on any
// replica, finds the first attempt's announcement in the bucket
// (skill.Answered) and answers, and leaves the note, from its report.
func (s *Service) reloadSkillsCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session) error {
	by := m.platform + ":" + m.src.GetUserId()
	return s.once(ctx, m, "reload-skills", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		r, failed, err := s.reloadSkills(ctx, m, by)
		if err != nil {
			return "", 0, err
		}
		if failed != nil {
			s.log.WarnContext(ctx, "skill reload not announced", "by", by, "err", failed)
			return "❌ Skills reload failed: " + failed.Error(), sess.Generation, nil
		}
		s.log.InfoContext(ctx, "skills reloaded by command", "by", by, "added", len(r.Added), "removed", len(r.Removed), "total", r.Total)
		if len(r.Added)+len(r.Removed) > 0 {
			if err := st.SetSkillsNote(ctx, m.key, reloadNote(r.Added, r.Removed)); err != nil {
				return "", 0, err
			}
		}
		return reloadAnswer(r.Added, r.Removed, r.Total), sess.Generation, nil
	})
}

// reloadSkills is the report of /reload-skills m: an earlier attempt's
// from its announcement, else this replica's scan, announced. failed is
// an announcement that failed, which changed nothing (Hermes answers
// its failure); err one that cannot tell whether an earlier attempt
// announced, which the bus retries as it retries a failed transaction.
func (s *Service) reloadSkills(ctx context.Context, m *msgCtx, by string) (r skill.Report, failed, err error) {
	if s.skills == nil {
		return skill.Report{}, nil, nil
	}
	kv, err := s.skillsKV(ctx)
	if err != nil {
		return skill.Report{}, nil, err
	}
	r, found, err := skill.Answered(ctx, kv, m.dedupeID)
	if err != nil {
		return skill.Report{}, nil, err
	}
	if found {
		s.log.InfoContext(ctx, "skill reload announced by an earlier attempt; answering from its scan", "by", by, "event", m.dedupeID)
		return r, nil, nil
	}
	r, failed = s.skills.ReloadAnnounced(ctx, kv, by, m.dedupeID, m.platform)
	return r, failed, nil
}

// reloadItem is one skill of the answer and the note, as Hermes's.
func reloadItem(it skill.Item) string {
	if it.Description == "" {
		return "    - " + it.Command
	}
	return "    - " + it.Command + ": " + it.Description
}

// reloadAnswer is Hermes's answer (locales gateway.reload_skills).
func reloadAnswer(added, removed []skill.Item, total int) string {
	lines := []string{"🔄 **Skills Reloaded**\n"}
	if len(added) == 0 && len(removed) == 0 {
		lines = append(lines, "No new skills detected.")
	}
	if len(added) > 0 {
		lines = append(lines, "➕ **Added Skills:**")
		for _, it := range added {
			lines = append(lines, reloadItem(it))
		}
	}
	if len(removed) > 0 {
		lines = append(lines, "➖ **Removed Skills:**")
		for _, it := range removed {
			lines = append(lines, reloadItem(it))
		}
	}
	lines = append(lines, fmt.Sprintf("\n📚 %d skill(s) available", total))
	return strings.Join(lines, "\n")
}

// reloadNote is Hermes's one-shot note for the session's next turn
// that runs the agent on a message (gateway/run.py
// _handle_reload_skills_command; Hermes takes it where it prepends it to
// the message of the next agent run, so /undo and /compress, answered
// without one, leave it pending, sessionstore.TakesSkillsNote, and a
// turn that ends before any model read it, a /retry with nothing to
// retry, gives it back, services/worker noteToReturn): the turn carries it
// (TurnRequested.skills_note) and the worker prepends it to the model's
// copy of the turn's user message, as Hermes prepends it to the message
// of its next agent run; the transcript keeps what the user typed.
//
// Hermes's last line is "Use skills_list to see the updated catalog.":
// Hermes's agent has the skills_list and skill_view tools, and lists
// the skills in its system prompt. Switchboard's agent has neither (its
// built-in tools are clock, memory, session_search, send_message and
// cronjob, services/worker.registry; its system prompt lists no skill):
// a skill's instructions reach the model only when the user types its
// command and the router expands it (skill.Invocation). The line would
// send the model after a tool it cannot call, so it says how a skill
// runs here instead.
func reloadNote(added, removed []skill.Item) string {
	sections := []string{"[USER INITIATED SKILLS RELOAD:"}
	if len(added) > 0 {
		sections = append(sections, "", "Added Skills:")
		for _, it := range added {
			sections = append(sections, reloadItem(it))
		}
	}
	if len(removed) > 0 {
		sections = append(sections, "", "Removed Skills:")
		for _, it := range removed {
			sections = append(sections, reloadItem(it))
		}
	}
	return strings.Join(append(sections, "", "The user runs a skill by typing /<name>.]"), "\n")
}
