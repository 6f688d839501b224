// Package config loads Switchboard's one YAML file (shared by every
// service) with environment overrides into a typed struct, warns about
// unknown or misplaced keys naming the nearest valid path, and stops on
// invalid values with a clear message.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix marks environment variables that override config keys:
// SWITCHBOARD_ROUTER__BUSY_MODE=queue sets router.busy_mode ("__" nests).
const EnvPrefix = "SWITCHBOARD_"

// notSettings are SWITCHBOARD_ variables that are no config keys: the
// config file's path, secrets and addresses read on their own, the image.
var notSettings = map[string]bool{"CONFIG": true, "ADMIN_TOKEN": true, "ADMIN_ADDR": true, "IMAGE": true}

// serviceLink matches the variables Kubernetes injects for each Service
// of the namespace (SWITCHBOARD_ROUTER_SERVICE_HOST,
// SWITCHBOARD_ADMIN_PORT_7070_TCP_ADDR, …): a pod sees dozens of them.
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// notConfig reports whether the SWITCHBOARD_ variable named
// SWITCHBOARD_<rest> is something other than a config key, which is not
// worth a warning. Keys of sections always contain "__".
func notConfig(rest string) bool {
	return notSettings[rest] || !strings.Contains(rest, "__") && serviceLink.MatchString(rest)
}

// Warning is a non-fatal finding about the config, such as an unknown key.
type Warning struct {
	Key        string
	Source     string
	Suggestion string
}

func (w Warning) String() string {
	s := fmt.Sprintf("unknown config key %q (from %s)", w.Key, w.Source)
	if w.Suggestion != "" {
		s += fmt.Sprintf("; did you mean %q?", w.Suggestion)
	}
	return s
}

// Validator is implemented by config structs that check their values.
type Validator interface{ Validate() error }

// Options says where config comes from besides the struct's defaults.
type Options struct {
	// Path of the YAML file; empty means defaults and environment only.
	Path string
	// Environ is the environment as KEY=VALUE strings; nil uses os.Environ.
	Environ []string
	// Aliases maps well-known environment variables to config keys, e.g.
	// NATS_URL → nats.url, TELEGRAM_BOT_TOKEN → gateways.telegram.token.
	// They apply before SWITCHBOARD_ variables, which win.
	Aliases map[string]string
}

// Load fills out (a pointer to a struct with koanf tags, already holding
// the defaults) from the file and the environment. Unknown keys produce
// warnings; values of the wrong type and a failed Validate are errors.
func Load(opts Options, out any) ([]Warning, error) {
	k := koanf.New(".")
	known := KnownKeys(out)
	var warnings []Warning

	if opts.Path != "" {
		if err := k.Load(file.Provider(opts.Path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("read config %s: %w", opts.Path, err)
		}
		for _, key := range k.Keys() {
			if !known.Has(key) {
				warnings = append(warnings, Warning{Key: key, Source: opts.Path, Suggestion: known.Nearest(key)})
			}
		}
	}

	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	aliased := map[string]any{}
	prefixed := map[string]any{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if key, ok := opts.Aliases[name]; ok && value != "" {
			aliased[key] = value
		}
		if rest, ok := strings.CutPrefix(name, EnvPrefix); ok && rest != "" && !notConfig(rest) {
			key := strings.ToLower(strings.ReplaceAll(rest, "__", "."))
			if !known.Has(key) {
				warnings = append(warnings, Warning{Key: key, Source: "$" + name, Suggestion: known.Nearest(key)})
				continue
			}
			prefixed[key] = value
		}
	}
	for _, m := range []map[string]any{aliased, prefixed} {
		if err := k.Load(confmap.Provider(m, "."), nil); err != nil {
			return nil, fmt.Errorf("apply environment: %w", err)
		}
	}

	// A field tagged koanf:"-" is set by code only (a test's shorter
	// wait), but the decoder takes the tag for its key's name: a key
	// named "-" (warned about above) would set it.
	for _, key := range k.Keys() {
		if known.Has(key) {
			continue
		}
		path := strings.Split(key, ".")
		if i := slices.Index(path, "-"); i >= 0 {
			k.Delete(strings.Join(path[:i+1], "."))
		}
	}
	dec := koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			TagName:          "koanf",
			Result:           out,
			WeaklyTypedInput: true,
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				mapstructure.StringToTimeDurationHookFunc(),
				mapstructure.StringToSliceHookFunc(","),
				mapstructure.TextUnmarshallerHookFunc(),
				boolToText,
				textToBool,
			),
		},
	}
	if err := k.UnmarshalWithConf("", out, dec); err != nil {
		return warnings, fmt.Errorf("invalid config: %w", err)
	}
	if v, ok := out.(Validator); ok {
		if err := v.Validate(); err != nil {
			return warnings, fmt.Errorf("invalid config: %w", err)
		}
	}
	sort.Slice(warnings, func(i, j int) bool { return warnings[i].Key < warnings[j].Key })
	return warnings, nil
}

// boolToText reads a YAML boolean given to a text key as its word, true
// or false, where weak typing would make it "1" or "0": Hermes's settings
// take YAML booleans for modes (approvals.mode: false is off), and the
// parsers of those keys know the words.
func boolToText(from, to reflect.Type, data any) (any, error) {
	if b, ok := data.(bool); ok && from.Kind() == reflect.Bool && to.Kind() == reflect.String {
		return strconv.FormatBool(b), nil
	}
	return data, nil
}

// textToBool reads a boolean given as text (an environment variable,
// SLACK_REQUIRE_MENTION=yes; a quoted YAML "on") as Hermes does: "1",
// "true", "yes", "on" are true and "0", "false", "no", "off" false, in
// any case and with spaces around. Weak typing alone takes only
// strconv.ParseBool's words; those ("t", "F") still count, "" is false,
// and any other word stays an error naming the key.
func textToBool(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || from.Kind() != reflect.String || to.Kind() != reflect.Bool {
		return data, nil
	}
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return data, nil
}

// Keys is the set of valid key paths of a config struct.
type Keys struct {
	leaves []string
	// open are paths of maps of values: any key below them is valid.
	open []string
	// entries are maps of sections (webhook routes, per-platform
	// settings): below each, an entry's name, then the section's keys.
	entries []entryKeys
}

// entryKeys are the keys of the entries of a map of sections at path.
type entryKeys struct {
	path string
	keys Keys
}

// KnownKeys lists the key paths of the struct out points to.
func KnownKeys(out any) Keys {
	var ks Keys
	walk(reflect.TypeOf(out), "", &ks)
	sort.Strings(ks.leaves)
	return ks
}

func walk(t reflect.Type, prefix string, ks *Keys) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if prefix != "" && textual(t) {
			ks.leaves = append(ks.leaves, prefix)
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := strings.Split(f.Tag.Get("koanf"), ",")[0]
			if tag == "-" {
				continue
			}
			if tag == "" {
				if f.Anonymous {
					walk(f.Type, prefix, ks)
				}
				continue
			}
			walk(f.Type, join(prefix, tag), ks)
		}
	case reflect.Map:
		elem := t.Elem()
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		if elem.Kind() == reflect.Struct && !textual(elem) {
			var sub Keys
			walk(elem, "", &sub)
			sort.Strings(sub.leaves)
			ks.entries = append(ks.entries, entryKeys{path: prefix, keys: sub})
			return
		}
		ks.open = append(ks.open, prefix)
	default:
		ks.leaves = append(ks.leaves, prefix)
	}
}

// textual reports whether a struct type is one value, written as text.
func textual(t reflect.Type) bool {
	u := reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()
	return t.Implements(u) || reflect.PointerTo(t).Implements(u)
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// Has reports whether key is a valid path.
func (ks Keys) Has(key string) bool {
	i := sort.SearchStrings(ks.leaves, key)
	if i < len(ks.leaves) && ks.leaves[i] == key {
		return true
	}
	for _, o := range ks.open {
		if key == o || strings.HasPrefix(key, o+".") {
			return true
		}
	}
	for _, e := range ks.entries {
		rest, ok := strings.CutPrefix(key, e.path+".")
		if key == e.path || ok && e.has(rest) {
			return true
		}
	}
	return false
}

// has reports whether rest, an entry's name and what follows it, is an
// entry or a valid key of one. The name may hold dots (a route named
// example.com): every split between name and key is tried.
func (e entryKeys) has(rest string) bool {
	if rest == "" {
		return false
	}
	if !strings.Contains(rest, ".") {
		// The entry itself, given as one value.
		return true
	}
	for i := strings.IndexByte(rest, '.'); i >= 0; {
		if e.keys.Has(rest[i+1:]) {
			return true
		}
		j := strings.IndexByte(rest[i+1:], '.')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// Nearest returns the valid path closest to key, or "" when none is close.
// Flattened keys (session_reset_mode) and keys at the wrong level (mode)
// both find session_reset.mode; a key given without the section it lives
// in (Hermes's top-level session_reset.mode, router.session_reset.mode
// here), nested or flattened, finds its path under that section before
// another section's key of the same last name (approvals.mode).
func (ks Keys) Nearest(key string) string {
	for _, e := range ks.entries {
		// Within an entry: its name, then the nearest key of the section.
		if rest, ok := strings.CutPrefix(key, e.path+"."); ok {
			if name, sub, ok := strings.Cut(rest, "."); ok {
				if n := e.keys.Nearest(sub); n != "" {
					return e.path + "." + name + "." + n
				}
			}
		}
	}
	norm := func(s string) string {
		return strings.NewReplacer(".", "", "_", "", "-", "").Replace(strings.ToLower(s))
	}
	last := func(s string) string { return s[strings.LastIndex(s, ".")+1:] }
	best, bestScore := "", 1<<30
	nk, lk := norm(key), last(key)
	// flatTail reports whether key, separators aside, is the last
	// sections and name of cand (session_reset_mode of
	// router.session_reset.mode).
	flatTail := func(cand string) bool {
		for i := strings.IndexByte(cand, '.'); i >= 0; {
			if norm(cand[i+1:]) == nk {
				return true
			}
			j := strings.IndexByte(cand[i+1:], '.')
			if j < 0 {
				return false
			}
			i += 1 + j
		}
		return false
	}
	for _, cand := range append(append([]string{}, ks.leaves...), ks.open...) {
		score := levenshtein(nk, norm(cand))
		switch {
		case strings.HasSuffix(cand, "."+key):
			// The whole key, under a section it left out.
			score = 0
		case (lk == last(cand) || flatTail(cand)) && score > 1:
			// The right name at the wrong place, or a flattened key
			// under a section it left out.
			score = 1
		}
		if score < bestScore || (score == bestScore && cand < best) {
			best, bestScore = cand, score
		}
	}
	limit := len(nk) / 3
	if limit < 2 {
		limit = 2
	}
	if bestScore > limit {
		return ""
	}
	return best
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// ErrInvalid is wrapped by validation errors of config structs.
var ErrInvalid = errors.New("invalid value")

// Invalid builds a validation error naming the key and the accepted values.
func Invalid(key string, value any, want string) error {
	return fmt.Errorf("%w for %s: %v (want %s)", ErrInvalid, key, value, want)
}
