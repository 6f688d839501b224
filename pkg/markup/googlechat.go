package markup

import "strings"

// GoogleChat is Google Chat's markup (MARKUP_SYNTAX_CHAT): WhatsApp's
// formatting (*bold*, _italic_, ~strike~, `code`, ```blocks```), and a
// link as <url|text>, as Hermes's Google Chat adapter writes it
// (format_message).
var GoogleChat = func() Dialect {
	d := WhatsApp
	d.link = chatLink
	return d
}()

// chatLink writes <url|text> for a web or mail address; any other
// target, a text Chat's angle brackets cannot hold (< > |) and a label
// that names another address than the link's (a disguise) are shown as
// textLink shows them.
func chatLink(text, url string) string {
	lower := strings.ToLower(url)
	web := strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "mailto:")
	label := strings.ToLower(text)
	if !web || text == url || strings.ContainsAny(text, "<>|") || strings.ContainsAny(url, "<> ") ||
		strings.Contains(label, "://") || strings.HasPrefix(label, "www.") {
		return textLink(text, url)
	}
	return "<" + strings.ReplaceAll(url, "|", "%7C") + "|" + text + ">"
}
