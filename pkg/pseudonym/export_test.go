package pseudonym

// ScrubEach and ScrubScan are Scrub's two ways, whatever the number of
// ids, for the tests to compare. ScrubScan takes the forms that only
// ScrubEach can (scrubScan's false) as Scrub does, and reports whether
// it did.
func (p *Pseudonymizer) ScrubEach(text string, ids ...string) string {
	if p == nil || text == "" || len(ids) == 0 {
		return text
	}
	return p.scrubEach(text, scrubForms(ids))
}

func (p *Pseudonymizer) ScrubScan(text string, ids ...string) (out string, each bool) {
	if p == nil || text == "" || len(ids) == 0 {
		return text, false
	}
	forms := scrubForms(ids)
	if out, ok := p.scrubScan(text, forms, nil); ok {
		return out, false
	}
	return p.scrubEach(text, forms), true
}
