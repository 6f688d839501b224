package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// Attribute names whose values are personal, and how each is
// pseudonymized. Call sites use these names: a session key is
// session_key (or <something>_session_key), a platform's user, chat or
// thread id is user_id, chat_id or thread_id, whoever did something is
// by. A personal value under another name is logged as
// pseudonym.Personal, an error about an id the record does not name is
// wrapped in pseudonym.Naming.
var (
	// idAttrs hold one platform id.
	idAttrs = map[string]bool{"user_id": true, "user_id_alt": true, "chat_id": true, "thread_id": true}
	// keyAttrs hold a session key; so does any name ending in
	// _session_key.
	keyAttrs = map[string]bool{"session_key": true, "first_key": true, "last_key": true}
	// userKeyAttrs hold a user key, "<platform>:<user id>", or a
	// "session:<session key>" owner, or an operator.
	userKeyAttrs = map[string]bool{"by": true, "owner": true, "subject": true, "target": true, "user_key": true}
	// idListAttrs hold a list of platform ids ([]string, numbers:
	// []int64, fmt.Stringers: idList). Its ids are the record's as
	// much as an idAttrs attribute's: its errors are scrubbed of them.
	idListAttrs = map[string]bool{"user_ids": true, "chat_ids": true}
	// chatKeyAttrs hold a chat key, "<platform>:<account>:<chat id>".
	chatKeyAttrs = map[string]bool{"chat_key": true}
	// msgIDAttrs hold a bus message id, "<platform>:<account>:<event
	// id>", whose event id names someone on some platforms, or an id made
	// of one: a router notice's turn id, a delivery's idempotency key
	// (MsgID). Other values (a ULID turn id) are kept.
	msgIDAttrs = map[string]bool{"msg_id": true, "event": true, "turn_id": true, "key": true}
)

// Pseudonyms returns the Pseudonymizer cfg asks for, nil when
// log.pseudonymize is off.
func (cfg LogConfig) Pseudonyms() *pseudonym.Pseudonymizer {
	if !cfg.Pseudonymize {
		return nil
	}
	return pseudonym.New(cfg.PseudonymKey)
}

// pseudonymizeString is the value to show for the attribute name=s: a
// personal attribute's pseudonymized, any other with the session keys it
// names pseudonymized.
func pseudonymizeString(p *pseudonym.Pseudonymizer, name, s string) string {
	switch {
	case idAttrs[name]:
		return p.ID(s)
	case keyAttrs[name] || strings.HasSuffix(name, "_session_key"):
		return p.Key(s)
	case userKeyAttrs[name]:
		return p.UserKey(s)
	case chatKeyAttrs[name]:
		return p.ChatKey(s)
	case msgIDAttrs[name]:
		if ps := p.MsgID(s); ps != s {
			return ps
		}
	}
	return p.Text(s)
}

// pseudonymizeAttr is a slog.HandlerOptions.ReplaceAttr: the values of
// the personal attributes above become pseudonyms wherever they are (in
// groups too), and a session key inside any other string or error (an
// error message that names one, the log message) becomes its
// pseudonymized form.
func pseudonymizeAttr(p *pseudonym.Pseudonymizer) func(groups []string, a slog.Attr) slog.Attr {
	return func(groups []string, a slog.Attr) slog.Attr {
		v := a.Value // resolved by the handler
		switch {
		case len(groups) == 0 && a.Key == slog.LevelKey && isLevel(v):
			// The handler encodes a level that went through a
			// ReplaceAttr as any value, with encoding/json (its
			// MarshalJSON): as a string it writes it as it does
			// without one. A record's own attribute named "level"
			// is any other value, pseudonymized below (and a
			// struct's encodedValue never written as it is).
			return slog.String(a.Key, v.Any().(slog.Level).String())
		case v.Kind() == slog.KindGroup:
			return a
		case idAttrs[a.Key]:
			// Numbers too: a Telegram id logged as an int64.
			return slog.String(a.Key, p.ID(v.String()))
		case v.Kind() == slog.KindString:
			if s := v.String(); s != "" {
				return slog.String(a.Key, pseudonymizeString(p, a.Key, s))
			}
		case v.Kind() == slog.KindAny:
			return pseudonymizeAny(p, a)
		}
		return a
	}
}

// isLevel reports whether v is a record's level.
func isLevel(v slog.Value) bool {
	if v.Kind() != slog.KindAny {
		return false
	}
	_, ok := v.Any().(slog.Level)
	return ok
}

// pseudonymizeAny pseudonymizes an attribute whose value is any value:
// an error's text (the ids Naming marked it with, the session keys it
// names), a value marked Personal, a list of ids, and the ids inside a
// struct, a proto or a map, found by their names.
func pseudonymizeAny(p *pseudonym.Pseudonymizer, a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case error:
		if v == nil {
			return a
		}
		// Session keys first: Scrub would take an id out of a key,
		// which Text would then not know as one.
		s := v.Error()
		ps := p.ScrubNamed(p.Text(s), v)
		if ps != s {
			return slog.String(a.Key, ps)
		}
	case pseudonym.Personal:
		return slog.String(a.Key, p.ID(string(v)))
	case encodedValue:
		// Decoded by the record's scan already (withTrees).
		changed := false
		if tree := pseudonymizeTree(p, a.Key, v.tree, &changed); changed {
			return slog.Any(a.Key, tree)
		}
		return slog.Any(a.Key, v.v)
	default:
		if ids, ok := listedIDs(a.Key, v); ok {
			out := make([]string, len(ids))
			for i, id := range ids {
				out[i] = p.ID(id)
			}
			return slog.Any(a.Key, out)
		}
		// A value that names no one is logged as it is: as its String
		// or %+v by the text handler, its fields in their order by the
		// JSON one, not as the map decoded to look for ids in it.
		if tree, ok := structured(v); ok {
			changed := false
			if tree = pseudonymizeTree(p, a.Key, tree, &changed); changed {
				return slog.Any(a.Key, tree)
			}
		}
	}
	return a
}

// idList is v, a list of ids under an idListAttrs name, as the strings
// an id attribute of each would show (fmt.Sprint's, as slog's
// Value.String): strings ([]string, or of another string type),
// numbers ([]int64 Telegram ids, []int), fmt.Stringers, or any values
// holding those. It is false for any other value, and for a list
// holding a nil or another kind of value, which is pseudonymized as
// any value is (structured). A []string is its own list, not a copy.
func idList(v any) ([]string, bool) {
	if list, ok := v.([]string); ok {
		return list, true
	}
	rv := reflect.ValueOf(v)
	if k := rv.Kind(); k != reflect.Slice && k != reflect.Array {
		return nil, false
	}
	ids := make([]string, rv.Len())
	for i := range ids {
		e := rv.Index(i)
		if e.Kind() == reflect.Interface {
			if e.IsNil() {
				return nil, false
			}
			e = e.Elem()
		}
		if e.Kind() == reflect.Pointer && e.IsNil() {
			return nil, false
		}
		if e.Type().Implements(stringerType) {
			ids[i] = fmt.Sprint(e.Interface())
			continue
		}
		switch e.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			ids[i] = strconv.FormatInt(e.Int(), 10)
		case reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64: // not bytes
			ids[i] = strconv.FormatUint(e.Uint(), 10)
		case reflect.String:
			ids[i] = e.String()
		default:
			return nil, false
		}
	}
	return ids, true
}

var stringerType = reflect.TypeFor[fmt.Stringer]()

// holdsNames reports whether a value of type t may hold named fields
// when encoding/json writes it: a struct, a map, a pointer to one (a
// proto message among them), or a list of them or of any values. Its
// kinds are checked only, with no allocation: a record's scan asks it
// of every value logged with slog.Any.
func holdsNames(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return true
	case reflect.Slice, reflect.Array:
		e := t.Elem()
		if e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		switch e.Kind() {
		case reflect.Struct, reflect.Map, reflect.Interface, reflect.Slice, reflect.Array:
			return true
		}
	}
	return false
}

// structured is v, a struct, a map, a pointer to one (a proto message
// among them) or a list of them (holdsNames), as encoding/json writes
// it, which is how the JSON handler logs it: an object or a list whose
// names are the json names (a proto's are its fields' names, chat_id,
// user_id), decoded, for pseudonymizeTree to find the ids in by their
// names. It is false for any other value and for one that does not
// encode as an object or a list (a time, a text marshaler's).
func structured(v any) (any, bool) {
	if !holdsNames(reflect.TypeOf(v)) {
		return nil, false
	}
	b, err := marshalJSON(v)
	if err != nil || len(b) == 0 || b[0] != '{' && b[0] != '[' {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers written as they were
	var tree any
	if d.Decode(&tree) != nil {
		return nil, false
	}
	return tree, true
}

// marshalJSON is json.Marshal(v), with a panic in a MarshalJSON method
// (one that does not guard against a nil field) returned as an error.
// encoding/json passes such a panic on; slog's handlers recover from it
// where they write the value ("!PANIC: …"), but the record's scan and
// ReplaceAttr encode the value before, outside that recovery, where the
// panic would end the log call, and the process with it.
func marshalJSON(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("encode %T: panic: %v", v, r)
		}
	}()
	return json.Marshal(v)
}

// pseudonymizeTree pseudonymizes a decoded JSON value logged under the
// name name: the strings in it as attributes of their names are, lists
// of ids, objects and lists within, in place; a list's strings and
// numbers are under the list's name (chat_ids: […], the attribute's own
// name for a list logged as one). It sets *changed when it replaces
// anything.
func pseudonymizeTree(p *pseudonym.Pseudonymizer, name string, v any, changed *bool) any {
	switch v := v.(type) {
	case string:
		var ps string
		if idListAttrs[name] {
			ps = p.ID(v) // an id in a list of them
		} else {
			ps = pseudonymizeString(p, name, v)
		}
		*changed = *changed || ps != v
		return ps
	case json.Number:
		if idAttrs[name] || idListAttrs[name] { // an id, or one in a list of them
			*changed = true
			return p.ID(v.String())
		}
	case map[string]any:
		for k, inner := range v {
			v[k] = pseudonymizeTree(p, k, inner, changed)
		}
	case []any:
		for i, inner := range v {
			v[i] = pseudonymizeTree(p, name, inner, changed)
		}
	}
	return v
}

// treeIDs calls add with each id in a decoded JSON value (structured)
// logged under the name name: the strings and numbers under the names
// of idAttrs and idListAttrs, at any depth, as pseudonymizeTree shows
// them as pseudonyms, those in lists of ids too: the ids a struct, a
// proto or a map logged with slog.Any names.
func treeIDs(name string, v any, add func(string)) {
	switch v := v.(type) {
	case string:
		if idAttrs[name] || idListAttrs[name] {
			add(v)
		}
	case json.Number:
		if idAttrs[name] || idListAttrs[name] {
			add(v.String())
		}
	case map[string]any:
		for k, inner := range v {
			treeIDs(k, inner, add)
		}
	case []any:
		for _, inner := range v {
			treeIDs(name, inner, add)
		}
	}
}

// errorAttrs hold an error's text as a string (a send receipt's, an
// outbox row's last error).
var errorAttrs = map[string]bool{"err": true, "last_error": true, "receipt_error": true}

// namingHandler marks each error a record logs (an error value, or an
// errorAttrs string, its own or a With's), in groups too, as naming the
// ids the record names under idAttrs (and in lists under idListAttrs),
// its own or a With's, in groups or not, so pseudonymizeAttr takes
// them out of the error's text too: a platform's error about a chat
// ("failed to POST /_matrix/client/v3/join/!room:example.org",
// Twilio's "The 'To' number +1555…") is logged beside the chat's
// chat_id, and its text names the chat's pseudonym. A record with no
// id or no error goes through as it is, without an allocation.
type namingHandler struct {
	slog.Handler
	p *pseudonym.Pseudonymizer
	// ids are those the With attributes name, distinct; over: they
	// were more than maxRecordIDs. scrub is their Scrubber, which
	// their errors, and those of the records that name no other, are
	// marked with: a logger With thousands of ids makes its automaton
	// once, not for each record's error (nil with no ids).
	ids   []string
	over  bool
	scrub *pseudonym.Scrubber
	// base and steps, once a With attribute holds an error: the handler
	// before that With, and the Withs and groups from it on. The
	// handler's With'd errors are marked with the ids known when they
	// were added; a record naming others has them built again, marked
	// with those too (a cost for such a logger's records alone: none
	// with pseudonyms off, when there is no namingHandler).
	base  slog.Handler
	steps []withStep
}

// withStep is a With's attributes, or a group when they are nil.
type withStep struct {
	attrs []slog.Attr
	group string
}

// build is base with steps, their errors marked as naming the ids of
// scrub.
func build(base slog.Handler, steps []withStep, scrub *pseudonym.Scrubber, over bool) slog.Handler {
	h := base
	for _, st := range steps {
		if st.attrs == nil {
			h = h.WithGroup(st.group)
		} else {
			h = h.WithAttrs(markAll(st.attrs, scrub, over))
		}
	}
	return h
}

// markAll is attrs, each through markNaming.
func markAll(attrs []slog.Attr, scrub *pseudonym.Scrubber, over bool) []slog.Attr {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = markNaming(a, scrub, over)
	}
	return out
}

// maxRecordIDs bounds the distinct ids a record's errors are scrubbed
// of, its own and its logger's With attributes': a record names a chat,
// a thread and a user or two, in groups for a source and a target too,
// or a list of chats in a struct or a proto. Scrubbing an error costs a
// pass over its text whatever the number of ids (pseudonym.Scrub), but
// each id costs its forms' bytes, so a record naming more than
// thousands, which no call site writes, has its errors' text withheld
// rather than logged naming the ids past the bound.
const maxRecordIDs = 4096

// scanIDs is how many distinct ids a record's scan holds without an
// allocation: more than the handful a record names most often.
const scanIDs = 16

// withheld is the text of an error logged in a record naming more than
// maxRecordIDs ids.
var withheld = fmt.Sprintf("(error text withheld: the record names more than %d ids)", maxRecordIDs)

// recordScan is what a record's attributes hold, groups and nested
// groups among them: the distinct ids under idAttrs and in lists under
// idListAttrs (up to maxRecordIDs; the first scanIDs in an array, so
// that a record's scan allocates nothing), whether there were more,
// whether an error is among them, and whether a value that may hold
// ids by name (holdsNames: a struct, a proto, a map, a list of them)
// is, whose ids addNamed takes in.
type recordScan struct {
	buf [scanIDs]string
	n   int
	// more holds all the ids, and seen them, once they are more than
	// buf holds.
	more []string
	seen map[string]bool
	// trees are the values addNamed decoded, in the order it met
	// them (nil for one that does not decode), for the record to
	// reuse (withTrees).
	trees []decoded
	over  bool
	errs  bool
	named bool
}

func (s *recordScan) ids() []string {
	if s.more != nil {
		return s.more
	}
	return s.buf[:s.n]
}

// addID takes in one id, once.
func (s *recordScan) addID(id string) {
	if id == "" {
		return
	}
	if s.more == nil {
		if slices.Contains(s.buf[:s.n], id) {
			return
		}
		if s.n < len(s.buf) {
			s.buf[s.n] = id
			s.n++
			return
		}
		s.more = append(make([]string, 0, 4*len(s.buf)), s.buf[:]...)
		s.seen = make(map[string]bool, 4*len(s.buf))
		for _, known := range s.more {
			s.seen[known] = true
		}
	}
	if s.seen[id] {
		return
	}
	if len(s.more) == maxRecordIDs {
		s.over = true
		return
	}
	s.seen[id] = true
	s.more = append(s.more, id)
}

// add takes in a, and the attributes of a group or of a LogValuer that
// resolves to one.
func (s *recordScan) add(a slog.Attr) {
	v := a.Value
	if v.Kind() == slog.KindLogValuer {
		v = v.Resolve()
	}
	switch {
	case idAttrs[a.Key]:
		s.addID(v.String())
	case v.Kind() == slog.KindGroup:
		for _, g := range v.Group() {
			s.add(g)
		}
	case v.Kind() == slog.KindAny:
		if _, isErr := v.Any().(error); isErr {
			s.errs = true
		} else if ids, ok := listedIDs(a.Key, v.Any()); ok {
			for _, id := range ids {
				s.addID(id)
			}
		} else {
			s.named = s.named || holdsNames(reflect.TypeOf(v.Any()))
		}
	case v.Kind() == slog.KindString && errorAttrs[a.Key]:
		s.errs = true
	}
}

// addNamed takes in the ids inside a's values that hold them by name
// (a struct, a proto, a map, a list of them, in groups too), as their
// JSON shows them: an error beside a proto naming its chat names that
// chat as much as one beside a chat_id attribute. It encodes and
// decodes each such value (what pseudonymizeAttr does to show it), so
// a record's handler calls it only when the record has such a value
// and an error for the ids to be taken out of.
func (s *recordScan) addNamed(a slog.Attr) {
	v := a.Value
	if v.Kind() == slog.KindLogValuer {
		v = v.Resolve()
	}
	switch {
	case idAttrs[a.Key]:
	case v.Kind() == slog.KindGroup:
		for _, g := range v.Group() {
			s.addNamed(g)
		}
	case v.Kind() == slog.KindAny:
		if _, isErr := v.Any().(error); isErr {
			return
		}
		if _, ok := listedIDs(a.Key, v.Any()); ok {
			// Taken in by add, and logged as its ids' pseudonyms
			// (pseudonymizeAny), not as a tree.
			s.trees = append(s.trees, decoded{})
			return
		}
		tree, ok := structured(v.Any())
		if ok {
			treeIDs(a.Key, tree, s.addID)
		}
		s.trees = append(s.trees, decoded{v.Any(), reflect.TypeOf(v.Any()), tree})
	}
}

// listedIDs are the ids of v logged under the name name when it is a
// list of ids (idList) under an idListAttrs name, which the record
// shows as their pseudonyms: its errors are about them as much as
// about an id attribute's id.
func listedIDs(name string, v any) ([]string, bool) {
	if !idListAttrs[name] {
		return nil, false
	}
	return idList(v)
}

// decoded is a value v of type t as structured decoded it (nil when it
// did not).
type decoded struct {
	v    any
	t    reflect.Type
	tree any
}

// encodedValue is a value logged with slog.Any that the record's scan
// encoded to find the ids in (structured), with the tree it decoded,
// which pseudonymizeAny pseudonymizes rather than encode the value a
// second time. It never reaches the output: the handler's ReplaceAttr
// gives the tree, or the value when the tree names no one.
type encodedValue struct {
	v    any
	tree any
}

// withTrees is a with each value that addNamed decoded in it as an
// encodedValue: trees are the values addNamed met, in its order, each
// taken off as withTrees meets it again. A value not of the type met
// (a LogValuer that resolves to another) is left to be encoded again.
// The value put beside a tree is the one it was decoded from, not the
// one a LogValuer resolves to now: its tree naming no one says nothing
// of a later value, which may name a chat (the encodedValue's is logged
// as it is).
func withTrees(a slog.Attr, trees *[]decoded) slog.Attr {
	v := a.Value
	if v.Kind() == slog.KindLogValuer {
		v = v.Resolve()
	}
	switch {
	case idAttrs[a.Key]:
	case v.Kind() == slog.KindGroup:
		group := v.Group()
		out := make([]slog.Attr, len(group))
		for i, g := range group {
			out[i] = withTrees(g, trees)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case v.Kind() == slog.KindAny:
		if _, isErr := v.Any().(error); isErr || len(*trees) == 0 {
			return a
		}
		d := (*trees)[0]
		*trees = (*trees)[1:]
		if d.tree != nil && d.t == reflect.TypeOf(v.Any()) {
			return slog.Any(a.Key, encodedValue{v: d.v, tree: d.tree})
		}
	}
	return a
}

func (h namingHandler) Handle(ctx context.Context, r slog.Record) error {
	var s recordScan
	r.Attrs(func(a slog.Attr) bool {
		s.add(a)
		return true
	})
	if s.named && (s.errs || h.steps != nil) {
		// Ids inside structs and protos, for errors of the record or
		// of the logger's With to be scrubbed of.
		r.Attrs(func(a slog.Attr) bool {
			s.addNamed(a)
			return true
		})
	}
	// The logger's With'd errors are marked with its ids already.
	rebuild := h.steps != nil && !h.over && (s.over || h.adds(&s))
	if !rebuild && s.trees == nil && (!s.errs || len(s.ids())+len(h.ids) == 0 && !s.over && !h.over) {
		return h.Handler.Handle(ctx, r)
	}
	named, over := h.named(&s)
	// The record's errors, and its logger's when built again, are
	// scrubbed by one Scrubber, the logger's when the record names no
	// other id: its forms and automaton are made once.
	scrub := h.scrub
	if len(named) != len(h.ids) {
		scrub = h.p.Scrubber(named...)
	}
	handler := h.Handler
	if rebuild {
		handler = build(h.base, h.steps, scrub, over)
	}
	if !s.errs && s.trees == nil {
		return handler.Handle(ctx, r)
	}
	// The record again, its errors marked as naming the ids and the
	// values decoded to find them (s.trees) not to be encoded again.
	// With no ids to mark them with, its errors are left as they are,
	// as a record naming no one logs them (their own %+v, their
	// MarshalJSON), not as an error marked as naming none.
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	trees := s.trees
	mark := len(named) > 0 || over
	r.Attrs(func(a slog.Attr) bool {
		if trees != nil {
			a = withTrees(a, &trees)
		}
		if mark {
			a = markNaming(a, scrub, over)
		}
		out.AddAttrs(a)
		return true
	})
	return handler.Handle(ctx, out)
}

// adds reports whether the record's scan s holds an id the logger's
// With attributes do not.
func (h namingHandler) adds(s *recordScan) bool {
	ids := s.ids()
	if len(ids) == 0 {
		return false
	}
	known := h.known(len(ids))
	for _, id := range ids {
		if !known(id) {
			return true
		}
	}
	return false
}

// named are the distinct ids of the logger's With attributes and of a
// record's scan s, and whether they are more than maxRecordIDs.
func (h namingHandler) named(s *recordScan) ([]string, bool) {
	named := h.ids // copied before an id is added to it, never changed
	ids := s.ids()
	known := h.known(len(ids))
	for _, id := range ids {
		if !known(id) {
			if len(named) == len(h.ids) {
				named = slices.Clip(slices.Clone(h.ids))
			}
			named = append(named, id)
		}
	}
	return named, h.over || s.over || len(named) > maxRecordIDs
}

// known is a test of whether the logger's With attributes name an id,
// for n ids to be tested: a look through them for a few, a set when a
// look through each for each would cost more than making it.
func (h namingHandler) known(n int) func(string) bool {
	if len(h.ids)*n <= scanIDs*scanIDs {
		return func(id string) bool { return slices.Contains(h.ids, id) }
	}
	set := make(map[string]bool, len(h.ids))
	for _, id := range h.ids {
		set[id] = true
	}
	return func(id string) bool { return set[id] }
}

// markNaming is a with its errors, in groups too, marked as naming the
// ids of scrub; with over, their text withheld.
func markNaming(a slog.Attr, scrub *pseudonym.Scrubber, over bool) slog.Attr {
	v := a.Value
	if v.Kind() == slog.KindLogValuer {
		v = v.Resolve()
	}
	switch {
	case v.Kind() == slog.KindGroup:
		group := v.Group()
		out := make([]slog.Attr, len(group))
		for i, g := range group {
			out[i] = markNaming(g, scrub, over)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case v.Kind() == slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			if over {
				return slog.String(a.Key, withheld)
			}
			return slog.Any(a.Key, scrub.Naming(err))
		}
	case v.Kind() == slog.KindString && errorAttrs[a.Key] && v.String() != "":
		if over {
			return slog.String(a.Key, withheld)
		}
		return slog.Any(a.Key, scrub.Naming(errors.New(v.String())))
	}
	return a
}

func (h namingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var s recordScan
	for _, a := range attrs {
		s.add(a)
	}
	if s.named {
		// Whether the logger's records will log an error is not known
		// yet; a logger is made once for many records.
		for _, a := range attrs {
			s.addNamed(a)
		}
	}
	ids, over, scrub := h.ids, h.over, h.scrub
	if (len(s.ids()) > 0 || s.over) && !over { // past the bound, no more to keep
		ids, over = h.named(&s)
		if len(ids) != len(h.ids) {
			scrub = h.p.Scrubber(ids...)
		}
	}
	if !s.errs && h.steps == nil {
		return namingHandler{Handler: h.Handler.WithAttrs(attrs), p: h.p, ids: ids, over: over, scrub: scrub}
	}
	// Errors, or a With after them: kept, to be built again when
	// other ids are known.
	next := namingHandler{p: h.p, ids: ids, over: over, scrub: scrub, base: h.base, steps: h.steps}
	if h.steps == nil {
		next.base = h.Handler
	}
	next.steps = append(h.steps[:len(h.steps):len(h.steps)], withStep{attrs: attrs}) // never into a shared array
	if h.steps != nil && len(ids) != len(h.ids) || over != h.over {
		next.Handler = build(next.base, next.steps, scrub, over) // earlier errors name these ids too
	} else {
		next.Handler = h.Handler.WithAttrs(markAll(attrs, scrub, over))
	}
	return next
}

func (h namingHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	next := h
	next.Handler = h.Handler.WithGroup(name)
	if h.steps != nil {
		next.steps = append(h.steps[:len(h.steps):len(h.steps)], withStep{group: name})
	}
	return next
}

// pseudonymizingExporter hands its exporter spans whose names, status
// descriptions and string attributes (the spans' own, their events' —
// a recorded error's message — and their links') are pseudonymized as
// log attributes are, the ids in their URLs too (pseudonymizeURL). The
// spans of the HTTP and gRPC instrumentation libraries (otelhttp,
// otelgrpc) have their error texts withheld: a gRPC status's message
// or a client's error is the text of a handler or a platform this code
// does not write, which may name a chat or a user and names no id
// attribute to take them out by, as SpanError does for ours.
type pseudonymizingExporter struct {
	sdktrace.SpanExporter
	p *pseudonym.Pseudonymizer
}

func (e pseudonymizingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = pseudonymizedSpan{ReadOnlySpan: s, p: e.p}
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// pseudonymizedSpan is a span as pseudonymizingExporter shows it.
type pseudonymizedSpan struct {
	sdktrace.ReadOnlySpan
	p *pseudonym.Pseudonymizer
}

// instrumentationScope starts the names of the instrumentation
// libraries' tracers (go.opentelemetry.io/contrib/instrumentation/
// net/http/otelhttp, …/google.golang.org/grpc/otelgrpc).
const instrumentationScope = "go.opentelemetry.io/contrib/instrumentation/"

// withheldSpanText replaces an instrumentation library's error text on
// an exported span; the span keeps its status code, and its attributes
// the RPC's status code or the HTTP response's.
const withheldSpanText = "(error text withheld: an instrumentation library's text may name a chat or a user)"

// fromLibrary reports whether an instrumentation library recorded s.
func (s pseudonymizedSpan) fromLibrary() bool {
	return strings.HasPrefix(s.InstrumentationScope().Name, instrumentationScope)
}

// Name is the span's name, a URL path in it (the API gateway names its
// server spans by the request's path) pseudonymized as url.path is.
func (s pseudonymizedSpan) Name() string {
	name := s.ReadOnlySpan.Name()
	if strings.Contains(name, "/") {
		words := strings.Split(name, " ")
		for i, w := range words {
			if strings.HasPrefix(w, "/") || strings.Contains(w, "://") {
				words[i] = pseudonymizeURL(s.p, w)
			}
		}
		name = strings.Join(words, " ")
	}
	return s.p.Text(name)
}

func (s pseudonymizedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	if st.Description != "" && s.fromLibrary() {
		st.Description = withheldSpanText
		return st
	}
	st.Description = s.p.Text(st.Description)
	return st
}

func (s pseudonymizedSpan) Attributes() []attribute.KeyValue {
	return pseudonymizeKVs(s.p, s.ReadOnlySpan.Attributes())
}

func (s pseudonymizedSpan) Events() []sdktrace.Event {
	events := s.ReadOnlySpan.Events()
	library := s.fromLibrary()
	out := make([]sdktrace.Event, len(events))
	for i, ev := range events {
		ev.Attributes = pseudonymizeKVs(s.p, ev.Attributes)
		if library {
			ev.Attributes = withholdErrorTexts(ev.Attributes)
		}
		out[i] = ev
	}
	return out
}

// withholdErrorTexts is kvs with a recorded error's message
// (exception.message) withheld; it copies only when there is one.
func withholdErrorTexts(kvs []attribute.KeyValue) []attribute.KeyValue {
	i := slices.IndexFunc(kvs, func(kv attribute.KeyValue) bool { return kv.Key == "exception.message" })
	if i < 0 {
		return kvs
	}
	out := slices.Clone(kvs)
	out[i] = attribute.String("exception.message", withheldSpanText)
	return out
}

func (s pseudonymizedSpan) Links() []sdktrace.Link {
	links := s.ReadOnlySpan.Links()
	out := make([]sdktrace.Link, len(links))
	for i, l := range links {
		l.Attributes = pseudonymizeKVs(s.p, l.Attributes)
		out[i] = l
	}
	return out
}

// pseudonymizeKVs pseudonymizes string attributes by their names' last
// dot-separated part (session.session_key as session_key) and by what
// they contain; it copies only when something changes.
func pseudonymizeKVs(p *pseudonym.Pseudonymizer, kvs []attribute.KeyValue) []attribute.KeyValue {
	var out []attribute.KeyValue
	for i, kv := range kvs {
		if kv.Value.Type() != attribute.STRING {
			continue
		}
		name := string(kv.Key)
		if j := strings.LastIndexByte(name, '.'); j >= 0 {
			name = name[j+1:]
		}
		s := kv.Value.AsString()
		var ps string
		switch {
		case kv.Key == "url.query":
			// A query without its "?", its parameters looked at as a
			// URL's are, not as a path.
			ps = strings.TrimPrefix(pseudonymizeURL(p, "?"+s), "?")
		case urlAttrs[kv.Key]:
			ps = pseudonymizeURL(p, s)
		default:
			ps = pseudonymizeString(p, name, s)
		}
		if ps == s {
			continue
		}
		if out == nil {
			out = append([]attribute.KeyValue(nil), kvs...)
		}
		out[i] = attribute.String(string(kv.Key), ps)
	}
	if out == nil {
		return kvs
	}
	return out
}

// urlAttrs are the span attributes that hold a URL or a part of one
// (the semantic conventions' current names and their older ones).
var urlAttrs = map[attribute.Key]bool{
	"url.full": true, "url.path": true, "url.query": true, "url.original": true,
	"http.url": true, "http.target": true,
}

// pseudonymizeURL pseudonymizes the ids in a URL, or in its path and
// query: a query parameter by its name as a log attribute of that name
// (chat_id=…), and any path segment or query value shaped as an id
// (idShaped: a Telegram chat, a phone number, a Matrix room, an e-mail
// address) by its ID, the value unescaped (a room "%21r:server" as
// "!r:server"). The scheme and the host are kept; a port is no id.
func pseudonymizeURL(p *pseudonym.Pseudonymizer, u string) string {
	// The scheme and the host (with its port, an IPv6 one in brackets)
	// run up to the path, or to the query or the fragment of a URL with
	// no path; a "://" after a path or a query's start is no scheme's (a
	// URL in a query parameter).
	start := 0
	if i := strings.Index(u, "://"); i >= 0 && !strings.ContainsAny(u[:i], "/?#") {
		j := strings.IndexAny(u[i+3:], "/?#")
		if j < 0 {
			return p.Text(u) // a host alone
		}
		start = i + 3 + j
	}
	rest, fragment, hasFragment := strings.Cut(u[start:], "#")
	path, query, hasQuery := strings.Cut(rest, "?")
	var b strings.Builder
	b.WriteString(u[:start])
	for i, seg := range strings.Split(path, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if id := unescaped(seg, url.PathUnescape); idShaped(id) {
			b.WriteString(p.ID(id))
		} else {
			b.WriteString(p.Text(seg))
		}
	}
	if hasQuery {
		b.WriteByte('?')
		for i, param := range strings.Split(query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			k, v, hasValue := strings.Cut(param, "=")
			name, value := unescaped(k, queryUnescape), unescaped(v, queryUnescape)
			b.WriteString(k)
			if !hasValue {
				continue
			}
			b.WriteByte('=')
			switch {
			case value == "":
			case idShaped(value):
				b.WriteString(p.ID(value))
			default:
				if ps := pseudonymizeString(p, name, value); ps != value {
					b.WriteString(ps)
				} else {
					b.WriteString(v)
				}
			}
		}
	}
	if hasFragment {
		b.WriteString("#" + p.Text(fragment))
	}
	return b.String()
}

// queryUnescape unescapes a query's name or value as url.QueryUnescape
// does, a "+" read as a form's space, but for a "+" that starts a
// phone number written as it is: one before a digit at the value's
// start or after a ":" or ";" ("+15551234567", Twilio's
// "whatsapp:+15551234567", BlueBubbles's "iMessage;-;+15551234567"),
// which stays a "+". An id is logged as it is, so its pseudonym in a
// span must be that of the id a client's query names: a client that
// escapes (url.Values, url.QueryEscape) writes a space as "+" and a "+"
// as "%2B", and ":" and ";" as "%3A" and "%3B", so each id it writes
// (but one starting with a space before a digit) is read back as it
// is; one that writes a phone number as it is leaves its "+", and
// writes no space, which a URL cannot hold.
func queryUnescape(s string) (string, error) {
	if !strings.Contains(s, "+") {
		return url.PathUnescape(s)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '+' && !phonePlus(s, i) {
			b.WriteString("%20")
		} else {
			b.WriteByte(s[i])
		}
	}
	return url.PathUnescape(b.String()) // which keeps a "+"
}

// phonePlus reports whether the "+" at s[i] starts a phone number
// written as it is (queryUnescape).
func phonePlus(s string, i int) bool {
	return i+1 < len(s) && '0' <= s[i+1] && s[i+1] <= '9' && (i == 0 || s[i-1] == ':' || s[i-1] == ';')
}

// unescaped is s unescaped by unescape, or s as it is when it holds
// something that is no escape ("%zz"), for an id beside it to be found
// by its shape or its name all the same.
func unescaped(s string, unescape func(string) (string, error)) string {
	if u, err := unescape(s); err == nil {
		return u
	}
	return s
}

// idShaped reports whether a URL's path segment or query value has the
// shape of a platform's id of a chat or a user: 5 digits in a row (a
// Telegram or Discord id, a phone number; shorter numbers are pages,
// limits and statuses, as Scrub leaves them), an "@" inside it (an
// e-mail address, a Matrix user, a WhatsApp JID), or a Matrix room's
// "!room:server".
func idShaped(s string) bool {
	if at := strings.IndexByte(s, '@'); at > 0 && at < len(s)-1 || strings.HasPrefix(s, "@") && strings.Contains(s, ":") {
		return true
	}
	if strings.HasPrefix(s, "!") && strings.Contains(s, ":") {
		return true
	}
	digits := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			digits = 0
			continue
		}
		if digits++; digits >= 5 {
			return true
		}
	}
	return false
}
