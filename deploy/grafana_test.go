package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// metricDecl matches a prometheus.*Opts literal's name and, for a
	// *Vec, the label names that follow the literal (the literal may hold
	// one level of braces: Buckets: []float64{…}).
	metricDecl = regexp.MustCompile(`Name:\s*"(switchboard_[a-z0-9_]+)"(?:[^{}]|\{[^{}]*\})*\}(?:,\s*\[\]string\{([^}]*)\})?`)
	metricUse  = regexp.MustCompile(`\bswitchboard_[a-z0-9_]+`)
)

// declaredMetrics scans the module's Go code for metric names.
func declaredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for n := range declaredMetricLabels(t) {
		names[n] = true
	}
	return names
}

// declaredMetricLabels scans the module's Go code for metric names and
// the label names each is declared with.
func declaredMetricLabels(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	err := filepath.WalkDir(root(t), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "tools" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDecl.FindAllSubmatch(b, -1) {
			var labels []string
			for _, l := range strings.Split(string(m[2]), ",") {
				if l = strings.Trim(strings.TrimSpace(l), `"`); l != "" {
					labels = append(labels, l)
				}
			}
			names[string(m[1])] = labels
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root(t), "deploy/grafana/switchboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatal("dashboard needs a uid, a title and panels")
	}
	declared := declaredMetrics(t)
	if !declared["switchboard_bus_handled_total"] {
		t.Fatal("pkg/bus metrics not found: is the scan broken?")
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if !balanced(tg.Expr) {
				t.Errorf("panel %q %s: unbalanced brackets in %s", p.Title, tg.RefID, tg.Expr)
			}
			for _, m := range metricUse.FindAllString(tg.Expr, -1) {
				used[baseMetric(m, declared)] = true
			}
		}
	}
	for m := range used {
		if !declared[m] {
			t.Errorf("dashboard uses %s, which no code declares", m)
		}
	}
	for _, want := range []string{"switchboard_bus_redeliveries_total", "switchboard_bus_terminated_total", "switchboard_delivery_outbox_rows", "switchboard_llm_tokens_total", "switchboard_bus_consumer_pending",
		"switchboard_cron_runs_total", "switchboard_retention_skipped_total", "switchboard_api_runs_refused_total", "switchboard_sms_signature_failures_total"} {
		if !used[want] {
			t.Errorf("dashboard does not chart %s", want)
		}
	}
	// Every gateway's refused calls and skipped events are charted, so a
	// new gateway's are not forgotten (the admin API's failures and the
	// retention's skips are not a gateway's).
	for m := range declared {
		if gatewayRefusedOrSkipped.MatchString(m) && m != "switchboard_admin_auth_failures_total" && !used[m] {
			t.Errorf("dashboard does not chart %s (panels \"Webhook calls refused\", \"Refused share\" or \"Events skipped\")", m)
		}
	}
}

var gatewayRefusedOrSkipped = regexp.MustCompile(`^switchboard_(?:[a-z]+_(?:signature|auth)_failures|[a-z]+_[a-z]+_skipped)_total$`)

// baseMetric strips histogram suffixes unless the name is declared as is.
func baseMetric(m string, declared map[string]bool) string {
	if declared[m] {
		return m
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(m, s); ok {
			return b
		}
	}
	return m
}

func balanced(expr string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := false
	for _, r := range expr {
		switch {
		case r == '"':
			inString = !inString
		case inString:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inString
}

// The operator docs name only metrics the code exports: an alert on a
// name nobody exports never fires.
func TestDocumentedMetricsAreExported(t *testing.T) {
	t.Parallel()
	declared := declaredMetrics(t)
	for _, doc := range []string{"docs/operations.md", "README.md", "docs/architecture.md", "docs/reliability.md", "docs/gateways.md"} {
		b, err := os.ReadFile(filepath.Join(root(t), doc))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, loc := range metricUse.FindAllStringIndex(text, -1) {
			m := text[loc[0]:loc[1]]
			if strings.HasSuffix(m, "_") || strings.HasPrefix(text[loc[1]:], "(") {
				continue // a family (switchboard_router_*), or a SQL function
			}
			if base := baseMetric(m, declared); !declared[base] {
				t.Errorf("%s names %s, which no code declares", doc, m)
			}
		}
	}
}

// targetLabels are the labels Prometheus adds to every series it scrapes
// through the ServiceMonitor (deploy/k8s/base/servicemonitor.yaml).
var targetLabels = []string{"namespace", "pod", "instance", "job", "service", "endpoint", "container", "app_kubernetes_io_component"}

var (
	// selectorUse is a metric name and the matchers or label list in
	// braces right after it.
	selectorUse = regexp.MustCompile(`\b(switchboard_[a-z0-9_]+)\{([^}]*)\}`)
	// groupingUse is a by or without clause.
	groupingUse = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	matcherName = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=|$)`)
)

// labelsOf is the label set a series of metric m (a declared name or a
// histogram's _bucket, _sum or _count) can carry once scraped.
func labelsOf(m string, declared map[string][]string) (map[string]bool, bool) {
	base := m
	if _, ok := declared[m]; !ok {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, s); ok {
				base = b
				break
			}
		}
	}
	labels, ok := declared[base]
	if !ok {
		return nil, false
	}
	set := map[string]bool{}
	for _, l := range append(append([]string{}, labels...), targetLabels...) {
		set[l] = true
	}
	if strings.HasSuffix(m, "_bucket") && base != m {
		set["le"] = true
	}
	return set, true
}

// labelErrors checks that every label a PromQL expression (or a
// metric{label,…} mention in the docs) selects on or groups by exists
// on the metrics it names: a matcher on a label the code never sets
// selects nothing, so a panel stays empty and an alert never fires.
func labelErrors(expr string, declared map[string][]string) []string {
	var errs []string
	union := map[string]bool{}
	names := 0
	for _, m := range metricUse.FindAllString(expr, -1) {
		if set, ok := labelsOf(m, declared); ok {
			names++
			for l := range set {
				union[l] = true
			}
		}
	}
	for _, sel := range selectorUse.FindAllStringSubmatch(expr, -1) {
		set, ok := labelsOf(sel[1], declared)
		if !ok {
			continue // unknown names are reported by the name checks
		}
		for _, part := range strings.Split(sel[2], ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			mn := matcherName.FindStringSubmatch(part)
			if mn == nil {
				errs = append(errs, fmt.Sprintf("%s{%s}: cannot read matcher %q", sel[1], sel[2], part))
				continue
			}
			if !set[mn[1]] {
				errs = append(errs, fmt.Sprintf("%s has no label %q", sel[1], mn[1]))
			}
		}
	}
	// Only expressions over switchboard metrics alone are checked for
	// grouping: others (kube-state-metrics, up) have labels of their own.
	if names == 0 || len(metricUse.FindAllString(expr, -1)) != names || otherMetric.MatchString(expr) {
		return errs
	}
	for _, g := range groupingUse.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !union[l] {
				errs = append(errs, fmt.Sprintf("groups by %q, which none of its metrics has", l))
			}
		}
	}
	return errs
}

// otherMetric matches the metrics of other exporters an expression may
// mix in.
var otherMetric = regexp.MustCompile(`\b(?:up|kube_[a-z_]+|jetstream_[a-z_]+|go_[a-z_]+)\b`)

func TestMetricLabels(t *testing.T) {
	t.Parallel()
	declared := declaredMetricLabels(t)
	if got := declared["switchboard_bus_handled_total"]; strings.Join(got, ",") != "consumer,outcome" {
		t.Fatalf("switchboard_bus_handled_total labels %v: is the scan broken?", got)
	}
	if got, ok := declared["switchboard_api_runs_refused_total"]; !ok || len(got) != 0 {
		t.Fatalf("switchboard_api_runs_refused_total labels %v (declared %v): is the scan broken?", got, ok)
	}
	t.Run("dashboard", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(root(t), "deploy/grafana/switchboard.json"))
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				for _, e := range labelErrors(tg.Expr, declared) {
					t.Errorf("panel %q %s: %s", p.Title, tg.RefID, e)
				}
			}
		}
	})
	for _, doc := range []string{"docs/operations.md", "README.md", "docs/architecture.md", "docs/reliability.md", "docs/gateways.md", "docs/chat-gateways.md", "docs/performance.md"} {
		t.Run(doc, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(root(t), doc))
			if err != nil {
				t.Fatal(err)
			}
			// Code spans: the odd pieces between backticks.
			for i, span := range strings.Split(string(b), "`") {
				if i%2 == 0 || !strings.Contains(span, "switchboard_") {
					continue
				}
				for _, e := range labelErrors(span, declared) {
					t.Errorf("`%s`: %s", span, e)
				}
			}
		})
	}
}

func TestLabelErrors(t *testing.T) {
	t.Parallel()
	declared := map[string][]string{
		"switchboard_x_total":   {"platform", "result"},
		"switchboard_x_seconds": {"platform"},
	}
	tests := []struct {
		expr string
		want int
	}{
		{`sum by (platform) (rate(switchboard_x_total{result!="ok", namespace=~"$ns"}[5m]))`, 0},
		{`switchboard_x_total{platform,result}`, 0},
		{`histogram_quantile(0.99, sum by (platform, le) (rate(switchboard_x_seconds_bucket[5m])))`, 0},
		{`sum by (le) (rate(switchboard_x_seconds_sum[5m]))`, 1},
		{`switchboard_x_total{reason="bad"}`, 1},
		{`sum by (namespace, route) (increase(switchboard_x_total[15m]))`, 1},
		{`switchboard_x_total{provider}`, 1},
		{`kube_deployment_status_replicas_available{deployment="x"} unless on (deployment) switchboard_x_total`, 0},
		{`switchboard_unknown_total{anything="1"}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			if got := labelErrors(tt.expr, declared); len(got) != tt.want {
				t.Errorf("got %d errors %q, want %d", len(got), got, tt.want)
			}
		})
	}
}

// Every metric the code declares is named in the operator docs, in full
// or as the rest of a family (`switchboard_router_*` then
// `inbound_total{outcome}`): an operator cannot alert on a metric nobody
// told them about.
func TestEveryMetricIsDocumented(t *testing.T) {
	t.Parallel()
	var docs strings.Builder
	for _, doc := range []string{"docs/operations.md", "docs/chat-gateways.md", "docs/gateways.md", "docs/architecture.md", "docs/reliability.md", "README.md"} {
		b, err := os.ReadFile(filepath.Join(root(t), doc))
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	text := docs.String()
	for m := range declaredMetricLabels(t) {
		if regexp.MustCompile(`\b` + m + `\b`).MatchString(text) {
			continue
		}
		rest, _ := strings.CutPrefix(m, "switchboard_")
		family, member, _ := strings.Cut(rest, "_")
		if strings.Contains(text, "`switchboard_"+family+"_*`") && regexp.MustCompile("`"+member+`[{`+"`]").MatchString(text) {
			continue
		}
		if strings.HasSuffix(m, "_skipped_total") && strings.Contains(text, "`switchboard_<platform>_…_skipped_total{reason}`") {
			continue // each platform's, listed in docs/chat-gateways.md by pattern
		}
		t.Errorf("%s is not in the operator docs (docs/operations.md, Metric names)", m)
	}
}
