package hook

import (
	"net/http"
	"strings"
	"testing"
)

func FuzzPrepare(f *testing.F) {
	const secret = "s3cret"
	routes := map[string]*CompiledRoute{}
	for name, r := range map[string]Route{
		"gh":      {Secret: secret, Events: []string{"push", "issues.opened"}, Prompt: `{{event}} on {{.repository.full_name}} by {{.sender.login}}`, Reply: ReplyTarget{Platform: "telegram", ChatID: "-100"}},
		"gl":      {Secret: secret, Signature: SigGitLab, Prompt: `gitlab {{event}} {{.project.name}}`},
		"generic": {Secret: secret, Signature: SigGeneric, Header: "X-Signature", Prompt: `alert {{.alert}}`},
		"notify":  {Secret: secret, Signature: SigGeneric, DeliverOnly: true, Reply: ReplyTarget{Platform: "slack", ChatID: "C1"}},
	} {
		c, err := Compile(name, r, "")
		if err != nil {
			f.Fatal(err)
		}
		routes[name] = c
	}
	gh := `{"repository":{"full_name":"o/r"},"sender":{"login":"ann"},"action":"opened"}`
	f.Add("gh", gh, "issues", "d-1", Sign(secret, []byte(gh)))
	f.Add("gh", gh, "push", "", "sha256=00")
	f.Add("gl", `{"object_kind":"push","project":{"name":"p"}}`, "", "u-1", secret)
	f.Add("generic", `{"alert":"x"}`, "", "", strings.TrimPrefix(Sign(secret, []byte(`{"alert":"x"}`)), "sha256="))
	f.Add("notify", `{"version":"1"}`, "", "id:1", Sign(secret, []byte(`{"version":"1"}`)))
	f.Add("generic", `[1,2`, "", "", "zz")
	f.Fuzz(func(t *testing.T, route, body, event, id, sig string) {
		r, ok := routes[route]
		if !ok {
			r = routes["gh"]
		}
		h := http.Header{}
		h.Set("X-GitHub-Event", event)
		h.Set("X-GitHub-Delivery", id)
		for _, k := range []string{"X-Hub-Signature-256", "X-Gitlab-Token", "X-Signature", "X-Webhook-Signature"} {
			h.Set(k, sig)
		}
		ev, rerr := Prepare(r, "default", h, []byte(body))
		if rerr != nil {
			if ev != nil {
				t.Fatal("event with an error")
			}
			return
		}
		// Anything accepted carried a valid signature.
		if Verify(r, h, []byte(body)) != nil {
			t.Fatal("accepted a delivery with a bad signature")
		}
		if ev.GetEventId() == "" || ev.GetSource().GetChatId() == "" || !ev.GetInternal() || !ev.GetTransportAuthenticated() {
			t.Fatalf("incomplete event %v", ev)
		}
		if len(ev.GetText()) > maxPromptBytes*2 {
			t.Fatalf("prompt of %d bytes", len(ev.GetText()))
		}
	})
}

func FuzzCheckHMAC(f *testing.F) {
	f.Add("sha256=abcd", "body", true)
	f.Add(Sign("k", []byte("body")), "body", true)
	f.Add("", "", false)
	f.Fuzz(func(t *testing.T, header, body string, prefix bool) {
		err := CheckHMAC(header, "k", []byte(body), prefix)
		if err == nil && !strings.Contains(Sign("k", []byte(body)), strings.TrimPrefix(strings.ToLower(strings.TrimSpace(header)), "sha256=")) {
			t.Fatalf("accepted %q for %q", header, body)
		}
	})
}
