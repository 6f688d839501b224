package api

import (
	"net/url"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// mediaLinks is how an answer shows the media a send carries (a tool's
// picture, an external agent's file): a markdown link to each that has
// an http(s) URL, or the gateway's own link to a kept file (linkKept) —
// an image as an image — as the model's own text would link it; Hermes's
// API server answers with the text the agent wrote, its media references
// in it. Media still named only by its bytes_ref has no address a client
// could open and is left out.
func mediaLinks(atts []*eventsv1.Attachment) string {
	var links []string
	for _, a := range atts {
		u, err := url.Parse(a.GetUrl())
		if err != nil || (!isMediaPath(u) && ((u.Scheme != "http" && u.Scheme != "https") || u.Host == "")) {
			continue
		}
		label, link := linkLabel(a), linkEscaper.Replace(u.String())
		if a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE {
			links = append(links, "!["+label+"]("+link+")")
			continue
		}
		if label == "" {
			label = link
		}
		links = append(links, "["+label+"]("+link+")")
	}
	return strings.Join(links, "\n")
}

// linkEscaper escapes what would end a markdown link's destination.
var linkEscaper = strings.NewReplacer("(", "%28", ")", "%29", " ", "%20", "<", "%3C", ">", "%3E")

// linkLabel is an attachment's caption, else its file name, on one
// line and without the brackets that would end the link's text.
func linkLabel(a *eventsv1.Attachment) string {
	label := a.GetCaption()
	if strings.TrimSpace(label) == "" {
		label = a.GetFileName()
	}
	label = strings.NewReplacer("[", "(", "]", ")", "\r", " ", "\n", " ").Replace(label)
	return strings.TrimSpace(label)
}

// withMedia is an answer's text followed by the links to its media.
func withMedia(text string, media []string) string {
	links := strings.Join(media, "\n")
	switch {
	case links == "":
		return text
	case strings.TrimSpace(text) == "":
		return links
	default:
		return text + "\n\n" + links
	}
}
