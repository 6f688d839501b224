package deploy

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// workerDrain is the worker's default drain timeout (worker.drain_timeout).
const workerDrain = 25 * time.Second

// gatewayDrain bounds a gateway's stop after SIGTERM: its HTTP server's
// shutdown grace (gateways.api.shutdown_grace 10 s, the webhook gateway
// 10 s, the webhook platforms 5 s; BlueBubbles's then publishes what it
// holds for up to 5 s more), then the sends in flight (one
// platform.Options.SendTimeout, 30 s, for them all), then the reactions
// it was setting (5 s).
const gatewayDrain = 10*time.Second + 30*time.Second + 5*time.Second

func TestComposeLoadsWithEveryProfile(t *testing.T) {
	t.Parallel()
	always := []string{"nats", "redis", "postgres", "migrate", "router", "agent-worker", "delivery", "admin", "api", "webhook"}
	tests := []struct {
		profiles []string
		want     []string
		notWant  []string
	}{
		{profiles: nil, want: always, notWant: []string{"telegram", "discord", "slack", "whatsapp", "teams", "sms", "homeassistant", "fakellm"}},
		{profiles: []string{"demo"}, want: append(slices.Clone(always), "fakellm"), notWant: []string{"telegram"}},
		{profiles: []string{"telegram"}, want: append(slices.Clone(always), "telegram"), notWant: []string{"discord", "slack", "fakellm"}},
		{profiles: []string{"discord"}, want: append(slices.Clone(always), "discord")},
		{profiles: []string{"slack"}, want: append(slices.Clone(always), "slack")},
		{profiles: []string{"whatsapp"}, want: append(slices.Clone(always), "whatsapp"), notWant: []string{"telegram"}},
		{profiles: []string{"mattermost"}, want: append(slices.Clone(always), "mattermost"), notWant: []string{"matrix"}},
		{profiles: []string{"teams"}, want: append(slices.Clone(always), "teams"), notWant: []string{"whatsapp"}},
		{profiles: []string{"sms"}, want: append(slices.Clone(always), "sms"), notWant: []string{"whatsapp"}},
		{profiles: []string{"homeassistant"}, want: append(slices.Clone(always), "homeassistant"), notWant: []string{"mattermost"}},
		{profiles: []string{"line"}, want: append(slices.Clone(always), "line"), notWant: []string{"sms"}},
		{profiles: []string{"googlechat"}, want: append(slices.Clone(always), "googlechat"), notWant: []string{"teams"}},
		{profiles: []string{"*"}, want: append(slices.Clone(always), "telegram", "discord", "slack", "whatsapp", "mattermost", "teams", "sms", "homeassistant", "fakellm")},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append([]string{"profiles"}, tt.profiles...), "-"), func(t *testing.T) {
			t.Parallel()
			c, err := LoadCompose(context.Background(), root(t), tt.profiles, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.want {
				if _, ok := c.Project.Services[s]; !ok {
					t.Errorf("service %q missing with profiles %v", s, tt.profiles)
				}
			}
			for _, s := range tt.notWant {
				if _, ok := c.Project.Services[s]; ok {
					t.Errorf("service %q enabled with profiles %v", s, tt.profiles)
				}
			}
		})
	}
}

func loadAll(t *testing.T, env map[string]string) *Compose {
	t.Helper()
	c, err := LoadCompose(context.Background(), root(t), []string{"*"}, env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadAll(t, nil).Project

	for name, want := range map[string]int{"router": 2, "agent-worker": 2} {
		s := p.Services[name]
		if s.Deploy == nil || s.Deploy.Replicas == nil || *s.Deploy.Replicas != want {
			t.Errorf("%s: want deploy.replicas %d", name, want)
		}
	}
	w := p.Services["agent-worker"]
	if w.ContainerName != "" || len(w.Ports) != 0 {
		t.Errorf("agent-worker: container_name %q and ports %v stop --scale from working", w.ContainerName, w.Ports)
	}
	if got := w.Environment["OPENAI_BASE_URL"]; got == nil || *got != "http://fakellm:8700/v1" {
		t.Errorf("agent-worker OPENAI_BASE_URL without .env = %v, want the demo fake LLM", got)
	}
	if dep, ok := w.DependsOn["fakellm"]; !ok || dep.Required {
		t.Errorf("agent-worker must depend on fakellm with required: false (it exists only in the demo profile): %+v", dep)
	}

	api := p.Services["api"]
	if !publishes(api, 8642) {
		t.Errorf("api gateway does not publish 8642: %+v", api.Ports)
	}
	if !publishes(p.Services["webhook"], 8643) {
		t.Errorf("webhook gateway does not publish 8643")
	}
	if !publishes(p.Services["whatsapp"], 8645) {
		t.Errorf("whatsapp gateway does not publish 8645")
	}
	if !publishes(p.Services["sms"], 8646) {
		t.Errorf("sms gateway does not publish 8646")
	}
	if !publishes(p.Services["line"], 8649) {
		t.Errorf("line gateway does not publish 8649")
	}
	if !publishes(p.Services["teams"], 3978) {
		t.Errorf("teams gateway does not publish 3978")
	}
	if !publishes(p.Services["googlechat"], 8790) {
		t.Errorf("googlechat gateway does not publish 8790")
	}

	for name, profile := range map[string]string{"telegram": "telegram", "discord": "discord", "slack": "slack", "whatsapp": "whatsapp", "mattermost": "mattermost", "teams": "teams", "sms": "sms", "homeassistant": "homeassistant", "line": "line", "googlechat": "googlechat", "fakellm": "demo"} {
		if got := p.Services[name].Profiles; !slices.Equal(got, []string{profile}) {
			t.Errorf("%s: profiles %v, want [%s]", name, got, profile)
		}
	}

	nats := p.Services["nats"]
	if !strings.HasPrefix(nats.Image, "nats:2.1") || nats.Image < "nats:2.11" {
		t.Errorf("nats image %q: want nats:2.11 or newer (per-key TTL, message TTL)", nats.Image)
	}
	if !slices.Contains(nats.Command, "--jetstream") || !hasVolume(nats, "/data") {
		t.Errorf("nats: want JetStream with its store on a volume: %v %+v", nats.Command, nats.Volumes)
	}
	if !hasVolume(p.Services["postgres"], "/var/lib/postgresql/data") {
		t.Error("postgres: data not on a volume")
	}

	m := p.Services["migrate"]
	if m.Restart != "no" {
		t.Errorf("migrate restart %q, want \"no\" (one-shot)", m.Restart)
	}
}

func publishes(s types.ServiceConfig, port uint32) bool {
	for _, p := range s.Ports {
		if p.Target == port && p.Published != "" {
			return true
		}
	}
	return false
}

func hasVolume(s types.ServiceConfig, target string) bool {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == target {
			return true
		}
	}
	return false
}

// TestComposeStartsInOrder: every service has a health check; services wait
// for healthy dependencies and for migrate to complete.
func TestComposeStartsInOrder(t *testing.T) {
	t.Parallel()
	p := loadAll(t, nil).Project
	for name, s := range p.Services {
		if name == "migrate" {
			if s.HealthCheck == nil || !s.HealthCheck.Disable {
				t.Errorf("migrate is one-shot: disable its inherited health check")
			}
		} else if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no health check", name)
		}
		if IsSwitchboard(s) && name != "migrate" {
			test := s.HealthCheck.Test
			if len(test) < 3 || test[0] != "CMD" || test[1] != "/usr/local/bin/switchboard" || test[2] != "healthcheck" {
				t.Errorf("%s: health check %v: the image has no shell, use [CMD /usr/local/bin/switchboard healthcheck URL]", name, test)
			}
			if _, ok := s.DependsOn["migrate"]; !ok && name != "fakellm" {
				t.Errorf("%s: does not wait for migrate", name)
			}
		}
		for dep, d := range s.DependsOn {
			target, ok := p.Services[dep]
			if !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
				continue
			}
			want := types.ServiceConditionHealthy
			if dep == "migrate" {
				want = types.ServiceConditionCompletedSuccessfully
			}
			if d.Condition != want {
				t.Errorf("%s depends on %s with condition %q, want %q", name, dep, d.Condition, want)
			}
			if want == types.ServiceConditionHealthy && (target.HealthCheck == nil || target.HealthCheck.Disable) {
				t.Errorf("%s waits for %s to be healthy, but %s has no health check", name, dep, dep)
			}
		}
	}
}

// TestComposeGracePeriod: SIGKILL must not come before a worker or a
// gateway drained.
func TestComposeGracePeriod(t *testing.T) {
	t.Parallel()
	p := loadAll(t, nil).Project
	for name, s := range p.Services {
		if !IsSwitchboard(s) || name == "migrate" {
			continue
		}
		grace := 10 * time.Second // compose's default
		if s.StopGracePeriod != nil {
			grace = time.Duration(*s.StopGracePeriod)
		}
		drain := time.Duration(0)
		if len(s.Command) > 0 && s.Command[0] == "gateway" {
			drain = gatewayDrain
		}
		if slices.Equal(s.Command, []string{"worker"}) {
			drain = workerDrain
			if v := s.Environment["SWITCHBOARD_WORKER__DRAIN_TIMEOUT"]; v != nil {
				d, err := time.ParseDuration(*v)
				if err != nil {
					t.Fatalf("%s: SWITCHBOARD_WORKER__DRAIN_TIMEOUT %q: %v", name, *v, err)
				}
				drain = d
			}
		}
		if grace <= drain+5*time.Second {
			t.Errorf("%s: stop_grace_period %v, want more than drain %v + 5s", name, grace, drain)
		}
	}
}

// TestComposeSecretsStayWithTheirGateway: a platform's token reaches only
// that platform's gateway.
func TestComposeSecretsStayWithTheirGateway(t *testing.T) {
	t.Parallel()
	p := loadAll(t, nil).Project
	owners := map[string]string{
		"TELEGRAM_BOT_TOKEN": "telegram", "DISCORD_BOT_TOKEN": "discord",
		"SLACK_BOT_TOKEN": "slack", "SLACK_APP_TOKEN": "slack",
		"WHATSAPP_ACCESS_TOKEN": "whatsapp", "WHATSAPP_APP_SECRET": "whatsapp",
		"TEAMS_CLIENT_SECRET": "teams", "TWILIO_ACCOUNT_SID": "sms", "TWILIO_AUTH_TOKEN": "sms",
		"TWILIO_WEBHOOK_SHARED_KEY": "sms",
		"LINE_CHANNEL_ACCESS_TOKEN": "line", "LINE_CHANNEL_SECRET": "line", "GOOGLE_CHAT_SERVICE_ACCOUNT_JSON": "googlechat",
		"API_SERVER_KEY": "api", "SWITCHBOARD_ADMIN_TOKEN": "admin",
		// The router reads the provider too (routerProvider):
		// TestComposeRouterSeesTheWorkersProvider.
		"OPENAI_API_KEY": "agent-worker router", "ANTHROPIC_API_KEY": "agent-worker router",
	}
	for name, s := range p.Services {
		for v := range s.Environment {
			if owner, ok := owners[v]; ok && !slices.Contains(strings.Fields(owner), name) {
				t.Errorf("%s gets %s, which only %s needs", name, v, owner)
			}
		}
	}
	for v, owner := range owners {
		for _, o := range strings.Fields(owner) {
			if _, ok := p.Services[o].Environment[v]; !ok {
				t.Errorf("%s does not get %s", o, v)
			}
		}
	}
}

// llmVariables choose and reach the model provider (llm.FromEnv).
var llmVariables = []string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"}

// TestComposeRouterSeesTheWorkersProvider: the router reads the provider
// the workers use, as they read it: /provider names it, a bare /model
// lists its models, and /voice (and the voice mode a turn carries) is on
// only where the router finds an OpenAI-compatible provider. A router
// without the workers' variables says no provider is configured and
// refuses /voice while the workers could speak.
func TestComposeRouterSeesTheWorkersProvider(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{nil, {
		"OPENAI_BASE_URL": "https://openrouter.ai/api/v1", "OPENAI_API_KEY": "sk-x", "OPENAI_MODEL": "m",
		"ANTHROPIC_API_KEY": "sk-ant", "ANTHROPIC_BASE_URL": "https://a.example", "ANTHROPIC_MODEL": "claude",
	}} {
		p := loadAll(t, env).Project
		w, r := p.Services["agent-worker"].Environment, p.Services["router"].Environment
		for _, v := range llmVariables {
			wv, wok := w[v]
			rv, rok := r[v]
			if wok != rok || wok && (wv == nil) != (rv == nil) || wv != nil && rv != nil && *wv != *rv {
				t.Errorf(".env %v: %s is %s for the workers, %s for the router", env, v, show(wv, wok), show(rv, rok))
			}
		}
	}
}

func show(v *string, ok bool) string {
	switch {
	case !ok:
		return "absent"
	case v == nil:
		return "unset"
	}
	return strconv.Quote(*v)
}

var envLine = regexp.MustCompile(`^#?([A-Z][A-Z0-9_]*)=`)

// envExample reads .env.example: every VAR= or #VAR= line, each of which
// must follow a comment line.
func envExample(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root(t), EnvExample))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]bool{}
	prevComment := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := envLine.FindStringSubmatch(line); m != nil {
			if !prevComment {
				t.Errorf("%s:%d: %s has no comment line above it", EnvExample, n, m[1])
			}
			if vars[m[1]] {
				t.Errorf("%s:%d: %s listed twice", EnvExample, n, m[1])
			}
			vars[m[1]] = true
			prevComment = false
			continue
		}
		prevComment = strings.HasPrefix(line, "# ")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vars
}

// TestEnvExampleListsEveryVariable: every ${VAR} the compose file
// interpolates and every variable it passes through from .env is in
// .env.example, and .env.example lists nothing the compose file ignores.
func TestEnvExampleListsEveryVariable(t *testing.T) {
	t.Parallel()
	example := envExample(t)
	c := loadAll(t, nil)
	used := map[string]bool{}
	for _, v := range c.Variables {
		used[v] = true
	}
	// Entries without a value are passed through from .env when set.
	fixed := map[string]bool{}
	for _, s := range c.Project.Services {
		for k, v := range s.Environment {
			if v == nil {
				used[k] = true
			} else {
				fixed[k] = true
			}
		}
	}
	for v := range used {
		if !example[v] {
			t.Errorf("docker-compose.yaml uses %s, missing from %s", v, EnvExample)
		}
	}
	for v := range example {
		if !used[v] {
			t.Errorf("%s lists %s, which docker-compose.yaml never reads", EnvExample, v)
		}
	}
	if len(used) == 0 || len(fixed) == 0 {
		t.Fatal("no variables found: is the variable recording broken?")
	}
}

// TestComposeEnvOverrides: values from .env reach the services.
func TestComposeEnvOverrides(t *testing.T) {
	t.Parallel()
	c := loadAll(t, map[string]string{
		"OPENAI_BASE_URL":    "https://api.openai.com/v1",
		"TELEGRAM_BOT_TOKEN": "123:abc",
		"SWITCHBOARD_IMAGE":  "ghcr.io/switchboard-chat/switchboard:v1",
	})
	w := c.Project.Services["agent-worker"]
	if v := w.Environment["OPENAI_BASE_URL"]; v == nil || *v != "https://api.openai.com/v1" {
		t.Errorf("OPENAI_BASE_URL from .env not applied: %v", v)
	}
	if v := c.Project.Services["telegram"].Environment["TELEGRAM_BOT_TOKEN"]; v == nil || *v != "123:abc" {
		t.Errorf("TELEGRAM_BOT_TOKEN from .env not passed through: %v", v)
	}
	if w.Image != "ghcr.io/switchboard-chat/switchboard:v1" {
		t.Errorf("SWITCHBOARD_IMAGE not applied: %q", w.Image)
	}
}

func TestComposeInvocations(t *testing.T) {
	t.Parallel()
	inv, err := ComposeInvocations(context.Background(), root(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) < 10 {
		t.Fatalf("found %d switchboard services, want every service", len(inv))
	}
	for _, i := range inv {
		if len(i.Args) == 0 {
			t.Errorf("%s: no command", i.Where)
		}
	}
}

// TestComposePassesThePseudonymKey: log.pseudonym_key, set in .env,
// reaches every Switchboard service, so that one conversation has one
// pseudonym in every service's logs (docs/operations.md, "Pseudonyms in
// logs and traces") and `docker compose exec router switchboard
// pseudonym` prints what they show.
func TestComposePassesThePseudonymKey(t *testing.T) {
	t.Parallel()
	const name, key = "SWITCHBOARD_LOG__PSEUDONYM_KEY", "a deployment secret"
	p := loadAll(t, map[string]string{name: key}).Project
	n := 0
	for sname, s := range p.Services {
		if !strings.HasPrefix(s.Image, "switchboard") || sname == "fakellm" {
			continue
		}
		n++
		if v := s.Environment[name]; v == nil || *v != key {
			t.Errorf("%s: %s = %v, want the one .env sets", sname, name, v)
		}
	}
	if n < 10 {
		t.Fatalf("%d Switchboard services found: is the image check broken?", n)
	}
}
