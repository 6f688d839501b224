package pseudonym

import (
	"cmp"
	"slices"
	"strings"
)

// scrubScan is what scrubEach makes of text, found in one pass over it
// whatever the number of forms: an automaton of the forms (Aho–Corasick)
// finds every place each stands as a whole word in the text at once,
// and the places are then taken form by form, in scrubEach's order and
// by its rules, from those that the forms before left in the text. Its
// cost is that of the pass, the forms' bytes and the places found.
//
// scrubEach looks for each form in the text the forms before it left,
// pseudonyms in it: a form could stand across one of those pseudonyms,
// which is not in text. Only a form ending in "#" or holding a
// pseudonym's 12 hex digits at its start or after a "#" can; scrubScan
// returns false for such forms, for scrubEach to take them, so the two
// always agree.
//
// a is the automaton of forms when it was made before (a Scrubber's),
// nil for scrubScan to make it.
func (p *Pseudonymizer) scrubScan(text string, forms []scrubForm, a *automaton) (string, bool) {
	if a == nil {
		if !scannable(forms) {
			return "", false
		}
		a = newAutomaton(forms)
	}
	// Every place a form stands as a whole word in text: the only
	// places scrubEach can take it from, since a pseudonym put before
	// or after a place makes its boundary no looser (placeFree).
	type place struct{ form, start int }
	var places []place
	a.scan(text, func(form, end int) {
		f := forms[form]
		start := end - len(f.find)
		if (f.fold || text[start:end] == f.find) && wordBoundary(text, start, end) {
			places = append(places, place{form, start})
		}
	})
	if len(places) == 0 {
		return text, true
	}
	// The places of each form together, in the forms' order, each
	// form's in the text's (the automaton finds them by their ends).
	slices.SortStableFunc(places, func(a, b place) int { return cmp.Compare(a.form, b.form) })
	var given map[string]bool // the forms, for an address found in another case
	var taken, now []span     // the places taken, by their starts; those of one form
	for i := 0; i < len(places); {
		form := places[i].form
		f := forms[form]
		from := 0
		now = now[:0]
		for ; i < len(places) && places[i].form == form; i++ {
			start, end := places[i].start, places[i].start+len(f.find)
			if start < from || !placeFree(text, taken, start, end) {
				continue
			}
			if f.fold && text[start:end] != f.find {
				if given == nil {
					given = make(map[string]bool, len(forms))
					for _, o := range forms {
						given[o.find] = true
					}
				}
				if given[text[start:end]] {
					continue
				}
			}
			now = append(now, span{start, end, form})
			from = end
		}
		taken = mergeSpans(taken, now)
	}
	// The IDs put in the text: a form holding one's hex digits could
	// have stood across it in scrubEach's text.
	ids := make(map[string]string)
	hexes := make(map[string]bool)
	for _, t := range taken {
		id := forms[t.form].id
		if _, ok := ids[id]; !ok {
			ps := p.ID(id)
			ids[id] = ps
			hexes[ps[len(Prefix):]] = true
		}
	}
	for _, f := range forms {
		for j := 0; j+hexDigits <= len(f.find); j++ {
			if j > 0 && f.find[j-1] != Prefix[0] {
				continue
			}
			digits := f.find[j : j+hexDigits]
			if f.fold {
				digits = strings.ToLower(digits) // a pseudonym's digits are lower case
			}
			if hexes[digits] {
				return "", false
			}
		}
	}
	if len(taken) == 0 {
		return text, true
	}
	var b strings.Builder
	done := 0 // text[:done] is in b
	for _, t := range taken {
		b.WriteString(text[done:t.start])
		b.WriteString(ids[forms[t.form].id])
		done = t.end
	}
	b.WriteString(text[done:])
	return b.String(), true
}

// scannable reports whether scrubScan can take forms: none ends in
// "#" (scrubScan's comment).
func scannable(forms []scrubForm) bool {
	for _, f := range forms {
		if strings.HasSuffix(f.find, Prefix) {
			return false
		}
	}
	return true
}

// span is the place text[start:end] a form was taken from.
type span struct{ start, end, form int }

// placeFree reports whether text[start:end], a whole word in text,
// still stands as one in the text that scrubEach sees once the places
// taken (sorted, apart) are pseudonyms: it overlaps none of them, and
// where one ends right before it, that pseudonym's last hex digit is a
// letter or digit that a letter or digit at its start touches. (One
// that starts right after it starts with "#", which touches nothing.)
func placeFree(text string, taken []span, start, end int) bool {
	// The first place taken that ends after start.
	k, _ := slices.BinarySearchFunc(taken, start+1, func(t span, x int) int { return cmp.Compare(t.end, x) })
	if k < len(taken) && taken[k].start < end {
		return false
	}
	if k > 0 && taken[k-1].end == start && isAlnum(text[start]) {
		return false
	}
	return true
}

// mergeSpans is taken with now's spans among them, both sorted and
// apart from each other.
func mergeSpans(taken, now []span) []span {
	if len(now) == 0 {
		return taken
	}
	out := make([]span, 0, len(taken)+len(now))
	i, j := 0, 0
	for i < len(taken) && j < len(now) {
		if taken[i].start < now[j].start {
			out = append(out, taken[i])
			i++
		} else {
			out = append(out, now[j])
			j++
		}
	}
	out = append(out, taken[i:]...)
	return append(out, now[j:]...)
}

// automaton finds every place in a text where one of a set of forms
// ends, ASCII letters in any case, in one pass over the text
// (Aho–Corasick): a trie of the forms in lower case, each node with the
// node of its longest suffix that is in the trie too (fail), where the
// pass goes on when the text leaves the trie.
type automaton struct {
	// root holds the root's children by their bytes (0 for none: the
	// root is no one's child), for the pass's most frequent move.
	root  [256]int32
	nodes []acNode
	edges []acEdge
	// next chains the forms that end at the same node (one address in
	// two cases), -1 ending the chain.
	next []int32
}

// acNode is a node of the trie: the string from the root to it.
type acNode struct {
	edges int32 // its first child's edge, -1 for none
	fail  int32 // the node of its longest proper suffix in the trie
	out   int32 // a form that ends here, -1 for none
	dict  int32 // the nearest node on the fail chain where a form ends, -1 for none
}

// acEdge is an edge to a child of a node other than the root.
type acEdge struct {
	c        byte
	to, next int32 // the child, and the node's next edge (-1 for none)
}

// newAutomaton builds the automaton of forms.
func newAutomaton(forms []scrubForm) *automaton {
	a := &automaton{nodes: []acNode{{edges: -1, out: -1, dict: -1}}, next: make([]int32, len(forms))}
	for i, f := range forms {
		n := int32(0)
		for j := 0; j < len(f.find); j++ {
			c := lowerASCII(f.find[j])
			child := a.child(n, c)
			if child == 0 {
				child = a.add(n, c)
			}
			n = child
		}
		a.next[i] = a.nodes[n].out
		a.nodes[n].out = int32(i)
	}
	// Fail links breadth first: a node's is found from its parent's,
	// which is nearer the root.
	queue := make([]int32, 0, len(a.nodes))
	for _, child := range a.root {
		if child != 0 {
			queue = append(queue, child) // fail 0, dict -1: no form is one byte
		}
	}
	for ; len(queue) > 0; queue = queue[1:] {
		u := queue[0]
		for e := a.nodes[u].edges; e >= 0; e = a.edges[e].next {
			v := a.edges[e].to
			f := a.move(a.nodes[u].fail, a.edges[e].c)
			a.nodes[v].fail = f
			if a.nodes[f].out >= 0 {
				a.nodes[v].dict = f
			} else {
				a.nodes[v].dict = a.nodes[f].dict
			}
			queue = append(queue, v)
		}
	}
	return a
}

// child is n's child by c, 0 for none.
func (a *automaton) child(n int32, c byte) int32 {
	if n == 0 {
		return a.root[c]
	}
	for e := a.nodes[n].edges; e >= 0; e = a.edges[e].next {
		if a.edges[e].c == c {
			return a.edges[e].to
		}
	}
	return 0
}

// add adds a child to n by c.
func (a *automaton) add(n int32, c byte) int32 {
	child := int32(len(a.nodes))
	a.nodes = append(a.nodes, acNode{edges: -1, out: -1, dict: -1})
	if n == 0 {
		a.root[c] = child
	} else {
		a.edges = append(a.edges, acEdge{c: c, to: child, next: a.nodes[n].edges})
		a.nodes[n].edges = int32(len(a.edges) - 1)
	}
	return child
}

// move is the node the pass is at after c in node n: n's child by c, or
// else its fail's move, or the root.
func (a *automaton) move(n int32, c byte) int32 {
	for n != 0 {
		if child := a.child(n, c); child != 0 {
			return child
		}
		n = a.nodes[n].fail
	}
	return a.root[c]
}

// scan calls found with each form that ends in text, and where it ends,
// in the order of the ends.
func (a *automaton) scan(text string, found func(form, end int)) {
	n := int32(0)
	for i := 0; i < len(text); i++ {
		n = a.move(n, lowerASCII(text[i]))
		for m := n; m > 0; m = a.nodes[m].dict {
			for f := a.nodes[m].out; f >= 0; f = a.next[f] {
				found(int(f), i+1)
			}
		}
	}
}
