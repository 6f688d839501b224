package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	metricDecl = regexp.MustCompile(`Name:\s*"(switchboard_[a-z0-9_]+)"`)
	metricUse  = regexp.MustCompile(`\bswitchboard_[a-z0-9_]+`)
)

// declaredMetrics scans the module's Go code for metric names.
func declaredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
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
			names[string(m[1])] = true
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
}

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
