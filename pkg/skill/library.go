package skill

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	reloads = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_skill_reloads_total",
		Help: "Re-scans of skills.dirs by this process, by what asked for it: command (/reload-skills answered here), announced (another process's /reload-skills, the admin API or a SIGHUP, followed through the SKILLS bucket), signal (a SIGHUP to this process).",
	}, []string{"source"})
	loaded = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchboard_skills_loaded",
		Help: "Skills this process holds after its last scan of skills.dirs, disabled ones included.",
	})
)

// Sources of a Reload, its metric's label.
const (
	SourceCommand   = "command"
	SourceAnnounced = "announced"
	SourceSignal    = "signal"
)

// Library is the skills a process holds: the Set its last scan of
// skills.dirs read, replaced whole by Reload. A turn in flight keeps the
// Set it read (a Set never changes), so a reload never shows it half a
// scan; Current is one atomic load.
type Library struct {
	cfg      Config
	reserved func(string) bool
	log      *slog.Logger
	cur      atomic.Pointer[Set]
	// fixed: built by Fixed, Reload keeps the Set.
	fixed bool

	mu      sync.Mutex // serializes Reload and the change callbacks
	changed []func(*Set)

	// following: Follow runs (one per process, dev's services share it).
	following atomic.Bool
	// seenMu guards seen and scanned.
	seenMu sync.Mutex
	// seen is the last reload announcement this process acted on (or
	// made itself, Announce); scanned is when the last scan began.
	seen    []byte
	scanned time.Time
}

// NewLibrary loads cfg's skills (Load, reserved as there), logging each
// problem to log (nil: slog.Default).
func NewLibrary(cfg Config, reserved func(string) bool, log *slog.Logger) *Library {
	if log == nil {
		log = slog.Default()
	}
	l := &Library{cfg: cfg, reserved: reserved, log: log}
	set, began := l.scan()
	l.scanned = began
	l.cur.Store(set)
	loaded.Set(float64(set.Len()))
	return l
}

// Fixed is a Library holding set, which Reload re-reads from no directory
// (tests, and callers that build a Set by hand).
func Fixed(set *Set) *Library {
	l := &Library{log: slog.Default(), fixed: true}
	l.cur.Store(set)
	return l
}

// scan loads the directories and logs what did not load; began is when
// it began reading them.
func (l *Library) scan() (set *Set, began time.Time) {
	began = time.Now()
	set, problems := Load(l.cfg, l.reserved)
	for _, p := range problems {
		l.log.Warn("skill not loaded", "path", p.Path, "reason", p.Reason)
	}
	for _, p := range set.BundleProblems() {
		l.log.Warn("skill bundle problem", "bundle", p.Path, "reason", p.Reason)
	}
	if len(l.cfg.Dirs) > 0 {
		l.log.Info("skills loaded", "skills", set.Len(), "skipped", len(problems))
	}
	return set, began
}

// rescan is Reload's scan under l.mu: before is the Set held, after the
// one read (before itself for a Library built by Fixed), began when the
// scan began. Nothing changes until install.
func (l *Library) rescan() (before, after *Set, began time.Time) {
	before = l.cur.Load()
	if l.fixed {
		return before, before, time.Now()
	}
	after, began = l.scan()
	return before, after, began
}

// install makes set, read by a scan that began at began, Current, under
// l.mu, then tells each OnChange callback.
func (l *Library) install(set *Set, began time.Time, source string) {
	l.seenMu.Lock()
	l.scanned = began
	l.seenMu.Unlock()
	l.cur.Store(set)
	loaded.Set(float64(set.Len()))
	reloads.WithLabelValues(source).Inc()
	for _, f := range l.changed {
		f(set)
	}
}

// Current is the Set last loaded; nil for a nil Library (no skills).
func (l *Library) Current() *Set {
	if l == nil {
		return nil
	}
	return l.cur.Load()
}

// Reload scans skills.dirs again and makes the result Current, then
// tells each OnChange callback; it returns the Set it replaced and the
// new one. Reloads run one at a time; a Library built by Fixed keeps
// its Set.
func (l *Library) Reload(source string) (before, after *Set) {
	l.mu.Lock()
	defer l.mu.Unlock()
	before, after, began := l.rescan()
	l.install(after, began, source)
	return before, after
}

// OnChange registers f, called with the new Set after each Reload (in
// the order registered, one reload at a time). A gateway refreshes its
// platform's command menu this way.
func (l *Library) OnChange(f func(*Set)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed = append(l.changed, f)
}

// Item is a skill in a reload's report: its command (as Hermes names a
// skill there) and its description.
type Item struct {
	Command     string `json:"command"`
	Description string `json:"description,omitempty"`
}

// Diff is what a reload changed for platform, as Hermes's reload_skills
// reports it: the commands of the skills that run there now and did not
// before (Added), those that ran before and no longer do (Removed), each
// by command, and how many run there now (Total).
func Diff(before, after *Set, platform string) (added, removed []Item, total int) {
	index := func(s *Set) map[string]string {
		m := map[string]string{}
		for _, sk := range s.Enabled(platform) {
			m[sk.Command] = sk.Description
		}
		return m
	}
	b, a := index(before), index(after)
	for c, d := range a {
		if _, ok := b[c]; !ok {
			added = append(added, Item{c, d})
		}
	}
	for c, d := range b {
		if _, ok := a[c]; !ok {
			removed = append(removed, Item{c, d})
		}
	}
	byCommand := func(x, y Item) int { return strings.Compare(x.Command, y.Command) }
	slices.SortFunc(added, byCommand)
	slices.SortFunc(removed, byCommand)
	return added, removed, len(a)
}
