package platform

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
)

// Delivery cuts an answer to the platform's limit before the gateway
// sees it, but a gateway may make a message longer after that: its
// markup conversion ("> " for a quote's ">", a code block's missing
// close), or the links of the attachments it adds to the text. A
// message over the limit is refused for good, and that part of the
// answer never arrives; it goes out as several instead.

// Pieces cuts text into messages that each fit l, as delivery cuts an
// answer (at a paragraph, line or word; a code block closed and
// reopened across a cut), without "(i/N)" counters: the pieces are one
// message of the answer. Text that fits is the only piece.
func Pieces(text string, l chunk.Limit) []string {
	if l.Fits(text) {
		return []string{text}
	}
	l.NoCounter = true
	return chunk.SplitLimit(text, l)
}

// SendPieces posts pieces in order with post and returns the first
// one's message id. One piece is posted as it is; of several, piece i
// is part part(i) of the send: one an earlier attempt sent is not
// posted again (SentPart), and each posted is recorded (RecordPart), so
// that a retry after a later piece failed sends only the rest.
func SendPieces(ctx context.Context, pieces []string, part func(i int) int, post func(ctx context.Context, i int, piece string) (string, error)) (string, error) {
	if len(pieces) == 1 {
		return post(ctx, 0, pieces[0])
	}
	first := ""
	for i, piece := range pieces {
		id, sent := SentPart(ctx, part(i))
		if !sent {
			var err error
			if id, err = post(ctx, i, piece); err != nil {
				return first, err
			}
			RecordPart(ctx, part(i), id)
		}
		if first == "" {
			first = id
		}
	}
	return first, nil
}

// CaptionPiecePart is the part of a send that is piece j (j ≥ 1) of
// attachment i's own caption, of n attachments, when that caption is
// over the platform's limit for a text and goes before its attachment
// as several messages: its first piece keeps the caption's own part
// number, the others take parts from captionPieceBase on, above every
// other part a send has (its text's pieces, its attachments' and their
// captions', far fewer than 1,000), and positive, as a send tag's part
// is (SendTag).
func CaptionPiecePart(n, i, j int) int { return captionPieceBase + (j-1)*n + i }

const captionPieceBase = 1000
