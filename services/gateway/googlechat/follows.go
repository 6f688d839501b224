package googlechat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// A message whose text is over the limit once converted goes on in
// follow-on messages (followID). What the gateway knows of them is kept
// in a note (platform.ReadNote) named by the message: how many there may
// be, their names and what they show. So an edit of a message that goes
// on in none (nearly all of them) asks Chat for nothing but its patch,
// and one of a split message patches only the follow-ons whose text
// changed; without the note, each edit looked for a follow-on with a
// get, usually answered 404, doubling the calls of a stream.
//
// The note is written before Chat is asked to make a follow-on or to
// change one (the follow-ons it may have, what they show not known),
// and again after (what they show): a gateway that dies in between
// leaves a note that claims a follow-on that may not exist, which the
// next edit patches (404: it makes it) or deletes (404: gone already),
// never one that misses a follow-on, which would be left showing stale
// text. A message without a note has no follow-ons: the sends that make
// them write it. A note outlives its last write by the receipts' time
// (24 h by default): a split message edited later than that is taken
// for one without follow-ons, whose surplus ones are then left.

// follow is one follow-on message as the note keeps it.
type follow struct {
	// Name is the message's name when it is not its client-assigned one
	// (followID): a follow-on made without it (makeFollow).
	Name string `json:"n,omitempty"`
	// Sum is the text it shows, hashed (textSum); "" when not known.
	Sum string `json:"s,omitempty"`
}

// follows are the follow-on messages of one message, 1 to len(F), that
// may exist.
type follows struct {
	F []follow `json:"f,omitempty"`

	rev   uint64 // the note's revision, 0: none yet
	noted bool   // read from a note (else probed, and not written)
}

// noteName names the note of message id.
func noteName(id string) string { return "follows " + id }

// textSum is what a note keeps of a follow-on's text.
func textSum(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:12])
}

// name is the name of follow-on i (≥ 1) of message id in space sp.
func (fs *follows) name(sp, id string, i int) string {
	if n := fs.F[i-1].Name; n != "" {
		return n
	}
	return sp + "/messages/" + followID(id, i)
}

// loadFollows reads what is known of the follow-on messages of message
// id in space sp: its note, or, for a request performed without the
// platform runner (tests that call the platform directly), what Chat
// shows, by asking for one follow-on after another until one is not
// found.
func (p *Platform) loadFollows(ctx context.Context, sp, id string) (*follows, error) {
	fs, err := readFollows(ctx, id)
	if errors.Is(err, platform.ErrNoNotes) {
		return p.probeFollows(ctx, sp, id)
	}
	return fs, err
}

// readFollows reads the note of message id's follow-on messages: none
// when there is no note; platform.ErrNoNotes for a request performed
// without the platform runner.
func readFollows(ctx context.Context, id string) (*follows, error) {
	data, rev, err := platform.ReadNote(ctx, noteName(id))
	if err != nil {
		return nil, err
	}
	fs := &follows{rev: rev, noted: true}
	if data != nil {
		if err := json.Unmarshal(data, fs); err != nil {
			return nil, fmt.Errorf("the note of %s's follow-on messages: %w", id, err)
		}
	}
	return fs, nil
}

// probeFollows asks Chat for the follow-on messages of message id.
func (p *Platform) probeFollows(ctx context.Context, sp, id string) (*follows, error) {
	fs := &follows{}
	for i := 1; i <= maxFollow; i++ {
		var cur created
		err := p.api.Do(ctx, http.MethodGet, p.base+"/v1/"+sp+"/messages/"+followID(id, i), nil, &cur)
		if apiStatus(err, http.StatusNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		fs.F = append(fs.F, follow{Sum: textSum(cur.Text)})
	}
	return fs, nil
}

// save writes the note of message id (nothing for probed follow-ons).
func (fs *follows) save(ctx context.Context, id string) error {
	if !fs.noted {
		return nil
	}
	data, err := json.Marshal(fs)
	if err != nil {
		return err
	}
	rev, err := platform.WriteNote(ctx, noteName(id), data, fs.rev)
	if err != nil {
		return fmt.Errorf("the note of %s's follow-on messages: %w", id, err)
	}
	fs.rev = rev
	return nil
}

// rewriteFollows makes the follow-on messages of message id in space sp
// show rest, the pieces of an edit's text after the first, in thread:
// those whose text changed are patched or made (writeFollow), those the
// text no longer needs deleted, and none is asked for when nothing
// changed. key is the edit's idempotency key.
func (p *Platform) rewriteFollows(ctx context.Context, sp, id, key string, rest []string, thread *Thread) error {
	fs, err := p.loadFollows(ctx, sp, id)
	if err != nil {
		return err
	}
	known := len(fs.F) // follow-ons that may exist
	var todo []int     // indexes into rest whose follow-on must change
	for i, piece := range rest {
		if i >= known || fs.F[i].Sum != textSum(piece) {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 && known <= len(rest) {
		return nil
	}
	// Noted before Chat is asked: they may exist, showing what is not
	// known.
	for len(fs.F) < len(rest) {
		fs.F = append(fs.F, follow{})
	}
	for _, i := range todo {
		fs.F[i].Sum = ""
	}
	if err := fs.save(ctx, id); err != nil {
		return err
	}
	for _, i := range todo {
		name, err := p.writeFollow(ctx, sp, id, key, i+1, i < known, fs, outgoing{Text: rest[i], Thread: thread})
		if name != "" && name != fs.name(sp, id, i+1) {
			// Made under a name the note does not have (without its
			// id): noted at once, before anything else can fail, or a
			// later edit (another key, another requestId) would not
			// find it and leave it showing this text.
			fs.F[i].Name = name
			if name == sp+"/messages/"+followID(id, i+1) {
				fs.F[i].Name = ""
			}
			if serr := fs.save(ctx, id); serr != nil {
				return errors.Join(err, serr)
			}
		}
		if err != nil {
			return err
		}
		fs.F[i].Sum = textSum(rest[i])
	}
	keep := len(rest) // follow-ons the note keeps
	for i := len(rest); i < len(fs.F); i++ {
		err := p.api.Do(ctx, http.MethodDelete, p.base+"/v1/"+fs.name(sp, id, i+1), nil, nil)
		var se *platform.SendError
		switch {
		case err == nil || apiStatus(err, http.StatusNotFound):
		case errors.As(err, &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT:
			// The edit's text shows whole: no failure, which would
			// tell the user the answer could not be sent. Kept in the
			// note, for the next edit to delete.
			p.log.Warn("google chat: a surplus follow-on message's delete refused; it is left", "message", id, "err", err)
			keep = i + 1
		default:
			return fmt.Errorf("a surplus message after the edit of %s: %w", id, err)
		}
	}
	fs.F = fs.F[:keep]
	if err := fs.save(ctx, id); err != nil {
		// Chat shows the edit; the note written before claims more than
		// there is, which the next edit finds out.
		p.log.Warn("google chat: note the follow-on messages of an edit", "err", err)
	}
	return nil
}

// writeFollow makes follow-on message i of message id show msg: patched
// when it exists (known: the note or the probe has it), else made
// (makeFollow); it returns the follow-on's name.
func (p *Platform) writeFollow(ctx context.Context, sp, id, key string, i int, known bool, fs *follows, msg outgoing) (string, error) {
	if known {
		name := fs.name(sp, id, i)
		err := p.api.Do(ctx, http.MethodPatch, p.base+"/v1/"+name+"?updateMask=text", outgoing{Text: msg.Text}, nil)
		if !apiStatus(err, http.StatusNotFound) {
			return name, err
		}
		// Never made (a gateway stopped after it noted it), or deleted
		// (by a user): made now.
	}
	return p.makeFollow(ctx, sp, id, key, i, msg)
}
