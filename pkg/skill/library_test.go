package skill_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

func TestParseIn(t *testing.T) {
	tests := []struct {
		name, in, folder, wantName, wantCmd string
		err                                 error
	}{
		{name: "no name key: the folder's", in: "---\ndescription: d\n---\nbody", folder: "pdf-tools", wantName: "pdf-tools", wantCmd: "pdf-tools"},
		{name: "no frontmatter: the folder's", in: "# Title\nbody\n", folder: "Notes Helper", wantName: "Notes Helper", wantCmd: "notes-helper"},
		{name: "a name key wins", in: "---\nname: real\n---\n", folder: "folder", wantName: "real", wantCmd: "real"},
		{name: "a name key without text is no name", in: "---\nname:\n---\n", folder: "folder", err: skill.ErrNoName},
		{name: "empty text is no name", in: "---\nname: ''\n---\n", folder: "folder", err: skill.ErrNoName},
		{name: "no folder: no name", in: "---\ndescription: d\n---\n", folder: "", err: skill.ErrNoName},
		{name: "a folder with a quote is a bad name", in: "body", folder: `say"hi`, err: skill.ErrBadName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sk, err := skill.ParseIn([]byte(tt.in), tt.folder)
			if tt.err != nil {
				if err != tt.err {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sk.Name != tt.wantName || sk.Command != tt.wantCmd {
				t.Fatalf("got %q %q, want %q %q", sk.Name, sk.Command, tt.wantName, tt.wantCmd)
			}
		})
	}
}

// setOf loads the skills md(name, desc) for each "name=desc" (a name
// starting with "off:" is disabled everywhere, "tg:" on telegram).
func setOf(t *testing.T, specs ...string) *skill.Set {
	t.Helper()
	dir := t.TempDir()
	cfg := skill.Config{Dirs: []string{dir}, MaxBytes: 4096, PlatformDisabled: map[string][]string{}}
	for _, s := range specs {
		name, desc, _ := strings.Cut(s, "=")
		if n, ok := strings.CutPrefix(name, "off:"); ok {
			name = n
			cfg.Disabled = append(cfg.Disabled, n)
		}
		if n, ok := strings.CutPrefix(name, "tg:"); ok {
			name = n
			cfg.PlatformDisabled["telegram"] = append(cfg.PlatformDisabled["telegram"], n)
		}
		writeSkill(t, filepath.Join(dir, name), md(name, desc))
	}
	set, problems := skill.Load(cfg, nil)
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	return set
}

func TestDiff(t *testing.T) {
	items := func(its []skill.Item) string {
		var out []string
		for _, it := range its {
			out = append(out, it.Command+":"+it.Description)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		name           string
		before, after  []string
		platform       string
		added, removed string
		total          int
		nilBefore      bool
	}{
		{name: "nothing changed", before: []string{"a=x", "b=y"}, after: []string{"a=x", "b=y"}, total: 2},
		{name: "added and removed, by command", before: []string{"a=x", "gone=old one"}, after: []string{"a=x", "zed=z", "fresh=new one"},
			added: "fresh:new one,zed:z", removed: "gone:old one", total: 3},
		{name: "a changed description is no change", before: []string{"a=x"}, after: []string{"a=other"}, total: 1},
		{name: "disabled now: removed", before: []string{"a=x", "b=y"}, after: []string{"a=x", "off:b=y"}, removed: "b:y", total: 1},
		{name: "enabled again: added", before: []string{"off:b=y"}, after: []string{"b=y"}, added: "b:y", total: 1},
		{name: "disabled on the platform only", before: []string{"a=x"}, after: []string{"a=x", "tg:t=tele"}, platform: "telegram", total: 1},
		{name: "elsewhere it is added", before: []string{"a=x"}, after: []string{"a=x", "tg:t=tele"}, platform: "discord", added: "t:tele", total: 2},
		{name: "from no set", nilBefore: true, after: []string{"a=x"}, added: "a:x", total: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before *skill.Set
			if !tt.nilBefore {
				before = setOf(t, tt.before...)
			}
			added, removed, total := skill.Diff(before, setOf(t, tt.after...), tt.platform)
			if items(added) != tt.added || items(removed) != tt.removed || total != tt.total {
				t.Fatalf("got +[%s] -[%s] %d, want +[%s] -[%s] %d", items(added), items(removed), total, tt.added, tt.removed, tt.total)
			}
		})
	}
}

// Reload swaps the Set while readers use it (run with -race): each
// reader sees a whole Set, the old or the new, never a mix.
func TestLibraryReloadSwapsWhole(t *testing.T) {
	dir := t.TempDir()
	writeSkill(t, filepath.Join(dir, "a"), md("a", "first"))
	lib := skill.NewLibrary(skill.Config{Dirs: []string{dir}, MaxBytes: 4096}, nil, nil)
	var menus [][]string
	var mu sync.Mutex
	lib.OnChange(func(s *skill.Set) {
		mu.Lock()
		defer mu.Unlock()
		var names []string
		for _, sk := range s.Enabled("") {
			names = append(names, sk.Command)
		}
		menus = append(menus, names)
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				set := lib.Current()
				n := len(set.Enabled(""))
				if _, st := set.Lookup("a", ""); st != skill.Enabled || n < 1 || n > 2 {
					t.Errorf("a reader saw %d skills, a=%v", n, st)
					return
				}
			}
		}()
	}
	writeSkill(t, filepath.Join(dir, "b"), md("b", "second"))
	before, after := lib.Reload(skill.SourceCommand)
	if before.Has("b") || !after.Has("b") || lib.Current() != after {
		t.Fatal("reload did not pick up b")
	}
	if err := os.RemoveAll(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	lib.Reload(skill.SourceSignal)
	close(stop)
	wg.Wait()
	if lib.Current().Has("b") {
		t.Fatal("b still loaded after its removal")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(menus) != 2 || strings.Join(menus[0], ",") != "a,b" || strings.Join(menus[1], ",") != "a" {
		t.Fatalf("OnChange saw %v", menus)
	}
	var none *skill.Library
	if none.Current() != nil {
		t.Fatal("a nil library has skills")
	}
	fixed := skill.Fixed(after)
	if _, s := fixed.Reload(skill.SourceCommand); s != after {
		t.Fatal("a fixed library changed")
	}
}

// Two processes follow the SKILLS bucket: one announcement makes both
// scan again; one that starts after it does not scan twice; the
// announcing library does not scan for its own announcement.
func TestFollowAnnouncements(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeSkill(t, filepath.Join(dir, "a"), md("a", "first"))
	cfg := skill.Config{Dirs: []string{dir}, MaxBytes: 4096}
	one, two := skill.NewLibrary(cfg, nil, nil), skill.NewLibrary(cfg, nil, nil)
	var scans [2]int
	var mu sync.Mutex
	for i, l := range []*skill.Library{one, two} {
		l.OnChange(func(*skill.Set) { mu.Lock(); scans[i]++; mu.Unlock() })
		if err := l.Follow(ctx, kv); err != nil {
			t.Fatal(err)
		}
		if err := l.Follow(ctx, kv); err != nil { // a second Follow is a no-op
			t.Fatal(err)
		}
	}
	writeSkill(t, filepath.Join(dir, "b"), md("b", "second"))
	if _, _, err := skill.Announce(ctx, kv, "admin"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both to load b", func() bool { return one.Current().Has("b") && two.Current().Has("b") })

	// A process started after the announcement has scanned already.
	three := skill.NewLibrary(cfg, nil, nil)
	threeScans := 0
	three.OnChange(func(*skill.Set) { mu.Lock(); threeScans++; mu.Unlock() })
	if err := three.Follow(ctx, kv); err != nil {
		t.Fatal(err)
	}

	// The announcing library scans by itself, not for its announcement.
	writeSkill(t, filepath.Join(dir, "c"), md("c", "third"))
	if err := one.Announce(ctx, kv, "telegram:1"); err != nil {
		t.Fatal(err)
	}
	one.Reload(skill.SourceCommand)
	waitFor(t, "the others to load c", func() bool { return two.Current().Has("c") && three.Current().Has("c") })
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if scans != [2]int{2, 2} || threeScans != 1 {
		t.Fatalf("scans %v and %d, want [2 2] and 1", scans, threeScans)
	}
}

// The replica answering /reload-skills scans, announces with its event
// and report, then holds the new skills; a redelivery of the event finds
// the report in the bucket (from any process), after later reloads too;
// an announcement that fails changes nothing.
func TestReloadAnnounced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeSkill(t, filepath.Join(dir, "a"), md("a", "first"))
	cfg := skill.Config{Dirs: []string{dir}, MaxBytes: 4096}
	one, two := skill.NewLibrary(cfg, nil, nil), skill.NewLibrary(cfg, nil, nil)
	var mu sync.Mutex
	scans := 0
	one.OnChange(func(*skill.Set) { mu.Lock(); scans++; mu.Unlock() })
	for _, l := range []*skill.Library{one, two} {
		if err := l.Follow(ctx, kv); err != nil {
			t.Fatal(err)
		}
	}
	const event = "telegram:bot1:42"
	if _, found, err := skill.Answered(ctx, kv, event); err != nil || found {
		t.Fatalf("an event never announced: found %v, %v", found, err)
	}

	writeSkill(t, filepath.Join(dir, "b"), md("b", "second"))
	r, err := one.ReloadAnnounced(ctx, kv, "telegram:1", event, "telegram")
	if err != nil {
		t.Fatal(err)
	}
	want := skill.Report{Added: []skill.Item{{Command: "b", Description: "second"}}, Total: 2}
	if !reflect.DeepEqual(r, want) || !one.Current().Has("b") {
		t.Fatalf("report %+v (b held: %v), want %+v", r, one.Current().Has("b"), want)
	}
	waitFor(t, "the other to load b", func() bool { return two.Current().Has("b") })

	// Later reloads, then the redelivery, read from another handle.
	for range 3 {
		if _, _, err := skill.Announce(ctx, kv, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	other, err := skill.OpenBucket(ctx, bustest.New(t, url).JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	got, found, err := skill.Answered(ctx, other, event)
	if err != nil || !found || !reflect.DeepEqual(got, want) {
		t.Fatalf("the redelivery read %+v, found %v (%v); want %+v", got, found, err, want)
	}
	if _, found, _ := skill.Answered(ctx, other, "telegram:bot1:43"); found {
		t.Fatal("another event found a report")
	}

	count := func() int { mu.Lock(); defer mu.Unlock(); return scans }
	// Its own reload, and one for each of the admin's three.
	waitFor(t, "the admin's reloads", func() bool { return count() == 4 })

	// An announcement that fails leaves the skills held as they were.
	writeSkill(t, filepath.Join(dir, "c"), md("c", "third"))
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, err := one.ReloadAnnounced(gone, kv, "telegram:1", "telegram:bot1:44", "telegram"); err == nil {
		t.Fatal("an announcement on a cancelled context succeeded")
	}
	if one.Current().Has("c") {
		t.Fatal("a failed announcement changed the skills held")
	}
	time.Sleep(200 * time.Millisecond) // a scan for its own announcement would show by now
	if n := count(); n != 4 {
		t.Fatalf("the announcing library scanned %d times, want 4", n)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
