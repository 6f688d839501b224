package line

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/gateway/line/linefake"
)

// TestConfiguredChatsLoggedByPseudonyms: the warning about free-response
// groups and rooms that are not allowed names them by their pseudonyms,
// as every log line names a chat.
func TestConfiguredChatsLoggedByPseudonyms(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	cfg := testConfig(f)
	cfg.AllowedGroups, cfg.FreeResponseGroups = []string{group}, []string{group, "C0ther0group"}
	cfg.FreeResponseRooms = []string{room}
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "k"}
	if _, err := NewPlatform(cfg, bustest.New(t, bustest.EmbeddedURL(t)), telemetry.NewLogger(logCfg, &logs), nil); err != nil {
		t.Fatal(err)
	}
	out, p := logs.String(), pseudonym.New(logCfg.PseudonymKey)
	for _, id := range []string{"C0ther0group", room} {
		if strings.Contains(out, id) {
			t.Errorf("the log names %s:\n%s", id, out)
		}
		if !strings.Contains(out, `"`+p.ID(id)+`"`) {
			t.Errorf("the log does not name %s by its pseudonym %s:\n%s", id, p.ID(id), out)
		}
	}
}
