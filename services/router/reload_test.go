package router

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

func writeTestSkill(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, skill.File), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Two router replicas, each with its own skills (two processes over one
// skills.dirs), each consuming its own inbound partitions: one
// /reload-skills on the first makes both serve the skill installed
// since; the answer is Hermes's, from the first one's scan; the chat's
// next message carries Hermes's note to the agent, once.
func TestReloadSkillsReachesEveryReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	writeTestSkill(t, dir, "review", reviewSkill)
	e.skillsCfg = &skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}
	cfg := testConfig()

	// alice's chat on the first replica's partition, another user's on
	// the second's (one partition each when the topology has one).
	topo := e.bus.Topology()
	partOf := func(user string) int { return topo.Partition(sessionkey.ChatKey(dm(user, "").Source)) }
	other := ""
	for i := range 200 {
		u := "user" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		if partOf(u) != partOf("alice") {
			other = u
			break
		}
	}
	var firstParts, secondParts []int
	if other == "" || topo.PartitionCount() < 2 {
		t.Fatal("the test topology has one inbound partition")
	}
	firstParts = []int{partOf("alice")}
	for p := range topo.PartitionCount() {
		if p != partOf("alice") {
			secondParts = append(secondParts, p)
		}
	}
	cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, other)
	first := e.startRouter(cfg, nil, firstParts)
	second := e.startRouter(cfg, e.secondBus(), secondParts)
	w := e.startWorker(nil)

	if got := e.ask(other, "/deploy now"); !strings.HasPrefix(got, "Unknown command /deploy.") {
		t.Fatalf("before the reload: %q", got)
	}
	if got := e.ask("alice", "/reload-skills"); got != "🔄 **Skills Reloaded**\n\nNo new skills detected.\n\n📚 1 skill(s) available" {
		t.Fatalf("a reload with nothing new: %q", got)
	}

	// Installed and removed on disk; Telegram's menu sends /reload_skills.
	writeTestSkill(t, dir, "deploy", "---\ndescription: Ship the build\n---\nDeploy it.\n") // named by its folder
	if err := os.RemoveAll(filepath.Join(dir, "review")); err != nil {
		t.Fatal(err)
	}
	want := "🔄 **Skills Reloaded**\n\n➕ **Added Skills:**\n    - deploy: Ship the build\n➖ **Removed Skills:**\n    - code-review: Review a diff\n\n📚 1 skill(s) available"
	if got := e.ask("alice", "/reload_skills"); got != want {
		t.Fatalf("answer:\n%s\nwant:\n%s", got, want)
	}
	if !first.skillSet().Has("deploy") || first.skillSet().Has("code-review") {
		t.Fatal("the answering replica did not reload")
	}
	waitFor(t, "the other replica to reload", func() bool {
		return second.skillSet().Has("deploy") && !second.skillSet().Has("code-review")
	})

	// The other replica runs the new skill and knows no more the old.
	sk, _ := second.skillSet().Lookup("deploy", "telegram")
	e.publish(dm(other, "/deploy now"))
	otherKey := "agent:main:telegram:dm:chat-" + other
	waitFor(t, "the new skill's turn on the other replica", func() bool {
		turns, _ := w.snapshot()
		return slices.Contains(inputsText(turns, otherKey), sk.Invocation("now"))
	})
	if got := e.ask(other, "/code-review"); !strings.HasPrefix(got, "Unknown command /code-review.") {
		t.Fatalf("the removed skill: %q", got)
	}

	// Hermes's note rides alice's next message, once.
	note := "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - deploy: Ship the build\n\nRemoved Skills:\n    - code-review: Review a diff\n\nThe user runs a skill by typing /<name>.]"
	aliceKey := "agent:main:telegram:dm:chat-alice"
	e.publish(dm("alice", "hello"))
	waitFor(t, "alice's turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, aliceKey)) == 1
	})
	e.publish(dm("alice", "again"))
	waitFor(t, "alice's second turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, aliceKey)) == 2
	})
	// On the turn, for the worker to give the model: the inputs are what
	// alice sent, so the transcript never holds the note.
	turns, _ := w.snapshot()
	if got := inputsText(turns, aliceKey); got[0] != "hello" || got[1] != "again" {
		t.Fatalf("alice's inputs %q, want what she sent", got)
	}
	if got := skillsNotes(turns, aliceKey); got[0] != note || got[1] != "" {
		t.Fatalf("alice's turns carried the notes %q, want the note on the first alone", got)
	}
	// The other chat got no note: its turn carried the invocation alone.
	for _, n := range skillsNotes(turns, otherKey) {
		if n != "" {
			t.Fatalf("another chat got the note: %q", n)
		}
	}
}

// skillsNotes are the /reload-skills notes of key's turns, in order.
func skillsNotes(turns []*turnsv1.TurnRequested, key string) []string {
	var out []string
	for _, t := range turns {
		if t.SessionKey == key {
			out = append(out, t.GetSkillsNote())
		}
	}
	return out
}

// A /reload-skills whose transaction fails after its announcement (here
// Postgres refuses the record of its answer once, as a connection lost
// before the commit would) is redelivered when every replica holds the
// new skills already: the redelivery answers from the first attempt's
// scan, announced in the SKILLS bucket, rather than "No new skills
// detected.", leaves Hermes's note for the chat's next turn, and scans
// nothing again.
func TestReloadSkillsRedeliveredAfterAFailedCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	writeTestSkill(t, dir, "review", reviewSkill)
	e.skillsCfg = &skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}
	first := e.startRouter(testConfig(), nil, nil)
	second := e.startRouter(testConfig(), e.secondBus(), []int{}) // follows the bucket, consumes nothing
	w := e.startWorker(nil)

	if _, err := e.db.Exec(ctx, `
CREATE SEQUENCE reload_answers;
CREATE FUNCTION refuse_first_reload_answer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.answer LIKE '%Skills Reloaded%' THEN
		IF nextval('reload_answers') = 1 THEN
			RAISE EXCEPTION 'connection lost before the commit (test)';
		END IF;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse_first_reload_answer BEFORE UPDATE ON command_effects
	FOR EACH ROW EXECUTE FUNCTION refuse_first_reload_answer();`); err != nil {
		t.Fatal(err)
	}

	writeTestSkill(t, dir, "deploy", "---\ndescription: Ship the build\n---\nDeploy it.\n")
	var scans atomic.Int32
	first.skills.OnChange(func(*skill.Set) { scans.Add(1) })
	want := "🔄 **Skills Reloaded**\n\n➕ **Added Skills:**\n    - deploy: Ship the build\n\n📚 2 skill(s) available"
	if got := e.ask("alice", "/reload-skills"); got != want {
		t.Fatalf("answer:\n%s\nwant:\n%s", got, want)
	}
	var attempts int
	if err := e.db.QueryRow(ctx, `SELECT last_value FROM reload_answers`).Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("%d attempts recorded an answer (%v), want 2: the refused one and the redelivery", attempts, err)
	}
	if !first.skillSet().Has("deploy") || !second.skillSet().Has("deploy") {
		t.Fatal("a replica does not hold the new skill")
	}
	if n := scans.Load(); n != 1 {
		t.Errorf("the answering replica took %d new scans, want 1: the redelivery answers from the first one's", n)
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := e.noticesTo("alice"); len(got) != 1 {
		t.Errorf("alice got %d answers, want 1: %q", len(got), got)
	}

	// The note rides the chat's next turn.
	e.publish(dm("alice", "hello"))
	aliceKey := "agent:main:telegram:dm:chat-alice"
	waitFor(t, "alice's turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, aliceKey)) == 1
	})
	turns, _ := w.snapshot()
	note := "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - deploy: Ship the build\n\nThe user runs a skill by typing /<name>.]"
	if got := skillsNotes(turns, aliceKey); got[0] != note {
		t.Fatalf("alice's turn carried the note %q, want %q", got[0], note)
	}
}

// Hermes's note waits for the next message the agent runs on: a /undo's
// or /compress's turn sends the model no user message (Hermes answers
// those commands without an agent run), so it carries no note, and the
// chat's next message does; /retry sends the last message again and
// takes it. Each command's turn is started from the queue, as a
// command's is, by a real router; the fake worker records the turns.
func TestSkillsNoteWaitsPastUndoAndCompress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.skillsCfg = &skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}
	cfg := testConfig()
	cases := []struct {
		command string
		takes   bool
	}{
		{"/undo", false},
		{"/undo 2", false},
		{"/compress", false},
		{"/compress here 2", false},
		{"/retry", true},
	}
	for i := range cases {
		cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, fmt.Sprint("user", i))
	}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	for i, tc := range cases {
		// One at a time: each reload finds the one skill installed for it.
		user := fmt.Sprint("user", i)
		name := fmt.Sprint("skill", i)
		writeTestSkill(t, dir, name, "---\ndescription: Skill "+name+"\n---\nDo it.\n")
		if got := e.ask(user, "/reload-skills"); !strings.Contains(got, "    - "+name+": Skill "+name) {
			t.Fatalf("%s: reload answer %q", tc.command, got)
		}
		note := "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - " + name + ": Skill " + name + "\n\nThe user runs a skill by typing /<name>.]"
		key := "agent:main:telegram:dm:chat-" + user
		for n, text := range []string{tc.command, "hello", "again"} {
			e.publish(dm(user, text))
			waitFor(t, user+"'s turn of "+text, func() bool {
				turns, _ := w.snapshot()
				return len(skillsNotes(turns, key)) == n+1
			})
		}
		turns, _ := w.snapshot()
		want := []string{"", note, ""}
		if tc.takes {
			want = []string{note, "", ""}
		}
		if got := skillsNotes(turns, key); !slices.Equal(got, want) {
			t.Errorf("%s then two messages: the turns carried the notes %q, want %q", tc.command, got, want)
		}
	}
}
