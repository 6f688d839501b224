package worker

import (
	"log/slog"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// TestCronAnswer: a cron run's answer goes under the job's name with
// Hermes's note, and not at all when it is [SILENT]; other turns' answers
// go as they are.
func TestCronAnswer(t *testing.T) {
	run := func(platform string) *turnRun {
		return &turnRun{log: slog.Default(), req: &turnsv1.TurnRequested{
			Origin: &eventsv1.SessionSource{Platform: platform, ChatName: "Morning feeds"}}}
	}
	cases := []struct {
		platform, text, want string
		deliver              bool
	}{
		{"cron", "All green.", "Cronjob Response: Morning feeds\n-------------\n\nAll green.\n\nNote: The agent cannot see this message, and therefore cannot respond to it.", true},
		{"cron", "[SILENT]", "", false},
		{"cron", "  [silent] nothing new\n", "", false},
		{"cron", "I was told to answer [SILENT] if nothing changed, but the build is red.", "Cronjob Response: Morning feeds\n-------------\n\nI was told to answer [SILENT] if nothing changed, but the build is red.\n\nNote: The agent cannot see this message, and therefore cannot respond to it.", true},
		{"telegram", "[SILENT]", "[SILENT]", true},
		// As Hermes's autonomous lanes: a marker on its own first or last
		// line, without its brackets, with stray punctuation, or translated.
		{"cron", "Nothing changed since yesterday.\n\n[SILENT]", "", false},
		{"cron", "[SILENT]\n(no new items)", "", false},
		{"cron", "SILENT", "", false},
		{"cron", "*NO_REPLY*", "", false},
		{"cron", "no reply.", "", false},
		{"cron", "[静默]", "", false},
		{"cron", "Silent retry succeeded.", "Cronjob Response: Morning feeds\n-------------\n\nSilent retry succeeded.\n\nNote: The agent cannot see this message, and therefore cannot respond to it.", true},
		{"cron", "[SILENT", "Cronjob Response: Morning feeds\n-------------\n\n[SILENT\n\nNote: The agent cannot see this message, and therefore cannot respond to it.", true},
	}
	for _, c := range cases {
		got, ok := run(c.platform).cronAnswer(c.text)
		if got != c.want || ok != c.deliver {
			t.Errorf("%s %q: %q %v, want %q %v", c.platform, c.text, got, ok, c.want, c.deliver)
		}
	}
}

// TestCronFailure: a failed cron run tells its chat which job failed, as
// Hermes's "⚠️ Cron job '<name>' failed:\n<error>" (delivery puts the ⚠️
// first); without it the chat got a bare error out of nowhere.
func TestCronFailure(t *testing.T) {
	r := &turnRun{log: slog.Default(), req: &turnsv1.TurnRequested{
		Origin: &eventsv1.SessionSource{Platform: "cron", ChatName: "Morning feeds"}}}
	if got, want := r.backgroundFailure("the model provider rejected the credentials"),
		"Cron job 'Morning feeds' failed:\nthe model provider rejected the credentials"; got != want {
		t.Errorf("failure %q, want %q", got, want)
	}
	if got, want := r.backgroundFailure(""), "Cron job 'Morning feeds' failed:\nSee logs for details"; got != want {
		t.Errorf("failure without a reason %q, want %q", got, want)
	}
	if got, want := r.backgroundFailure(r.interruptedText()), "Cron job 'Morning feeds' failed:\nThe run was interrupted before it finished."; got != want {
		t.Errorf("interrupted %q, want %q", got, want)
	}
	chat := &turnRun{log: slog.Default(), req: &turnsv1.TurnRequested{Origin: &eventsv1.SessionSource{Platform: "telegram"}}}
	if got := chat.backgroundFailure("boom"); got != "boom" {
		t.Errorf("a chat's failure %q", got)
	}
	if got := chat.backgroundFailure(chat.interruptedText()); !strings.Contains(got, "Please send it again") {
		t.Errorf("a chat's interrupted turn %q", got)
	}
}
