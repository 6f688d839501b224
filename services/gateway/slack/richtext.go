package slack

import (
	"cmp"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A message's text is not always all it says. Slack puts a forwarded
// message (the Forward and Share actions) in the forwarding message's
// attachments, flagged is_share (and is_msg_unfurl), with the original's
// text, fallback ("[date] author: text"), from_url (its permalink),
// footer ("Posted in #channel") and message_blocks; the forwarding
// message's own text is what the user typed with it, "" when nothing.
// Link previews and the legacy attachments of integrations' messages
// are attachments too, and a message may carry its words only in rich
// text blocks. Hermes's Slack adapter (_handle_slack_message) adds the
// text of the message's rich text blocks (_extract_text_from_slack_blocks)
// and of each attachment ("📎 [title](url)", its text or fallback cut at
// 500 characters, "_footer_") to the text; richText and attachmentText
// are those renderings.

// richBlock is a block of a message's blocks, or an element within one:
// rich_text, rich_text_section, rich_text_quote, rich_text_list,
// rich_text_preformatted, and the inline text, link, user, channel,
// usergroup, emoji, broadcast and date elements.
type richBlock struct {
	Type        string          `json:"type"`
	Elements    []richBlock     `json:"elements"`
	Style       json.RawMessage `json:"style"` // a list's "bullet"/"ordered"; an inline element's {bold …}
	Language    string          `json:"language"`
	Text        string          `json:"text"`
	URL         string          `json:"url"`
	ChannelID   string          `json:"channel_id"`
	UserID      string          `json:"user_id"`
	UsergroupID string          `json:"usergroup_id"`
	Name        string          `json:"name"`
	Range       string          `json:"range"`
	Fallback    string          `json:"fallback"`
	// Indent and Offset are a list's: its nesting depth (Slack sends a
	// nested list as a list of its own after its parent's item) and
	// how many items of its ordered list came before it (a list
	// continued after a nested one).
	Indent int `json:"indent"`
	Offset int `json:"offset"`
}

// slackAttachment is an entry of a message's attachments.
type slackAttachment struct {
	Title       string `json:"title"`
	TitleLink   string `json:"title_link"`
	FromURL     string `json:"from_url"`
	Text        string `json:"text"`
	Fallback    string `json:"fallback"`
	Footer      string `json:"footer"`
	IsShare     bool   `json:"is_share"`
	IsMsgUnfurl bool   `json:"is_msg_unfurl"`
	// MessageBlocks are a shared message's own blocks.
	MessageBlocks []struct {
		Message struct {
			Blocks []json.RawMessage `json:"blocks"`
		} `json:"message"`
	} `json:"message_blocks"`
}

// richBlocks decodes the rich text blocks of raw, a message's blocks.
// Other blocks (a section's text is an object) and any block that does
// not decode are left out: they must not make the message unreadable.
func richBlocks(raw []json.RawMessage) []richBlock {
	var out []richBlock
	for _, r := range raw {
		var b richBlock
		if json.Unmarshal(r, &b) == nil && b.Type == "rich_text" {
			out = append(out, b)
		}
	}
	return out
}

// attachments decodes a message's attachments; one that does not decode
// is left out.
func attachments(raw json.RawMessage) []slackAttachment {
	var out []slackAttachment
	for _, r := range rawList(raw) {
		var a slackAttachment
		if json.Unmarshal(r, &a) == nil {
			out = append(out, a)
		}
	}
	return out
}

// richText renders the rich text blocks among blocks as Hermes's
// _extract_text_from_slack_blocks does: a line per section, "> " before
// a quote's lines, "• " or "1. " before a list's items (numbered on
// from its offset, indented two spaces a level), a preformatted
// block fenced with ```, a link as "label (url)" (in code as written),
// mentions as Slack
// writes them in text (<@U…>, <#C…>), an emoji as :name:. Other blocks
// are left out.
func richText(blocks []richBlock) string {
	var lines []string
	line := func(text string, quote int, bullet string) {
		if strings.TrimSpace(text) == "" {
			return
		}
		text = strings.TrimRightFunc(bullet+text, unicode.IsSpace)
		if quote > 0 {
			// Every line of a quote is quoted, the lines of a text
			// element's "\n" too.
			prefix := strings.Repeat(">", quote) + " "
			text = prefix + strings.ReplaceAll(text, "\n", "\n"+prefix)
		}
		lines = append(lines, text)
	}
	var walk func(elements []richBlock, quote int, bullet string)
	walk = func(elements []richBlock, quote int, bullet string) {
		for _, el := range elements {
			switch el.Type {
			case "rich_text_section":
				line(inline(el.Elements), quote, bullet)
			case "rich_text_quote":
				// Its elements are inline ones, as a section's (text,
				// link, user …): a line of them is one text, not a line
				// each.
				for _, run := range runs(el.Elements, false) {
					if run.block != nil {
						walk([]richBlock{*run.block}, quote+1, "")
					} else {
						line(run.text, quote+1, "")
					}
				}
			case "rich_text_list":
				var style string
				_ = json.Unmarshal(el.Style, &style)
				for i, item := range el.Elements {
					b := strconv.Itoa(el.Offset+i+1) + ". "
					if style == "bullet" {
						b = "• "
					}
					walk([]richBlock{item}, quote, strings.Repeat("  ", max(el.Indent, 0))+b)
				}
			case "rich_text_preformatted":
				// Its elements are inline ones too (text and links):
				// the code is their text run together; a section in it
				// (not what Slack sends) is a line of its own, as in
				// Hermes.
				var code []string
				for _, run := range runs(el.Elements, true) {
					s := run.text
					if run.block != nil && run.block.Type == "rich_text_section" {
						s = inlineText(run.block.Elements, true)
					}
					if s != "" {
						code = append(code, s)
					}
				}
				if len(code) > 0 {
					line("```"+el.Language+"\n"+strings.Join(code, "\n")+"\n```", quote, bullet)
				}
			default:
				line(inline([]richBlock{el}), quote, bullet)
			}
		}
	}
	for _, b := range blocks {
		if b.Type == "rich_text" {
			walk(b.Elements, 0, "")
		}
	}
	return strings.Join(lines, "\n")
}

// run is a rich text block (a rich_text_section …) among a quote's or a
// preformatted block's elements, or the text of the inline elements
// between two of them.
type run struct {
	block *richBlock
	text  string
}

// runs splits elements, a quote's or a preformatted block's, into the
// rich text blocks among them (not what Slack sends there, but Hermes
// reads them) and the runs of inline elements between them, each run
// rendered as one text (inlineText, in code when code).
func runs(elements []richBlock, code bool) []run {
	var out []run
	var pending []richBlock
	flush := func() {
		if len(pending) > 0 {
			out = append(out, run{text: inlineText(pending, code)})
			pending = nil
		}
	}
	for i := range elements {
		if strings.HasPrefix(elements[i].Type, "rich_text_") {
			flush()
			out = append(out, run{block: &elements[i]})
			continue
		}
		pending = append(pending, elements[i])
	}
	flush()
	return out
}

// inline renders rich text's inline elements.
func inline(elements []richBlock) string { return inlineText(elements, false) }

// inlineText renders rich text's inline elements, in a preformatted
// block when code.
func inlineText(elements []richBlock, code bool) string {
	var b strings.Builder
	for _, el := range elements {
		switch el.Type {
		case "text":
			b.WriteString(el.Text)
		case "link":
			if code {
				// In code, what the user wrote: the URL (Slack links
				// one there), not a rendering that changes the code.
				b.WriteString(cmp.Or(el.Text, el.URL))
				continue
			}
			b.WriteString(cmp.Or(el.Text, el.URL) + " (" + el.URL + ")")
		case "channel":
			b.WriteString("<#" + el.ChannelID + ">")
		case "user":
			b.WriteString("<@" + el.UserID + ">")
		case "usergroup":
			b.WriteString("<!subteam^" + el.UsergroupID + ">")
		case "emoji":
			b.WriteString(":" + el.Name + ":")
		case "broadcast":
			b.WriteString("<!" + cmp.Or(el.Range, "here") + ">")
		case "date":
			b.WriteString(el.Fallback)
		}
	}
	return b.String()
}

// maxPreview is how much of a link preview's text Hermes shows.
const maxPreview = 500

// attachmentText renders a message's attachments as Hermes does, each
// "📎 [title](url)" (or the title, or the url alone), then its text (or
// fallback) indented, then "_footer_", separated by a blank line; one
// whose rendering text already has is left out. Hermes skips a message
// unfurl (is_msg_unfurl: the preview of a Slack message's link, which
// may be the bot's own message): so is one here, but not a forwarded
// message (is_share, which Slack flags is_msg_unfurl too), whose content
// is what the user sent, found nowhere else; its text is shown whole
// (Hermes cuts a preview's at 500 characters), else the text of its
// message_blocks, else its fallback.
func attachmentText(atts []slackAttachment, text string) string {
	var parts []string
	for _, a := range atts {
		if a.IsMsgUnfurl && !a.IsShare {
			continue
		}
		url := cmp.Or(a.TitleLink, a.FromURL)
		var header string
		switch {
		case a.Title != "" && url != "":
			header = "📎 [" + a.Title + "](" + url + ")"
		case a.Title != "":
			header = "📎 " + a.Title
		case url != "":
			header = "📎 " + url
		}
		body := a.Text
		if a.IsShare && body == "" {
			var blocks []json.RawMessage
			for _, mb := range a.MessageBlocks {
				blocks = append(blocks, mb.Message.Blocks...)
			}
			body = richText(richBlocks(blocks))
		}
		body = strings.TrimSpace(cmp.Or(body, a.Fallback))
		if !a.IsShare && utf8.RuneCountInString(body) > maxPreview {
			body = string([]rune(body)[:maxPreview-3]) + "..."
		}
		var section string
		switch {
		case header != "" && body != "":
			section = header + "\n   " + body
		case header != "":
			section = header
		case body != "":
			section = "📎 " + body
		default:
			continue
		}
		if strings.Contains(text, section) {
			continue
		}
		if a.Footer != "" {
			section += "\n   _" + a.Footer + "_"
		}
		parts = append(parts, section)
	}
	return strings.Join(parts, "\n\n")
}

// rawList is the items of a JSON array (none when raw is not one).
func rawList(raw json.RawMessage) []json.RawMessage {
	var list []json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &list) != nil {
		return nil
	}
	return list
}
