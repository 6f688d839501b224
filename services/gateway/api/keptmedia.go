package api

import (
	"bufio"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/config"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// Files an answer sends that exist only in the attachment store (a voice
// reply, a /save export, an external agent's file: a reply event's media
// naming bytes_ref, not a URL) have no address a client could open.
// Delivery hands them to the gateway as it hands them to every platform,
// a send with the attachment, and the chat platforms upload the bytes
// (platform.ReadOutbound). Here the gateway links them instead: each gets
// a record in the KV bucket GATEWAY_API_MEDIA — the file's reference and
// whose conversation it was sent to — under a link id, and the answer
// links GET /v1/media/{id}, which serves the bytes to the same client
// (the key the conversation belongs to) for gateways.api.media_ttl.
// Hermes's API server answers with the agent's text, whose MEDIA: tags
// name paths on the server's disk that no client can open.

// BucketMedia is the KV bucket (before the topology prefix) of the links
// to kept files.
const BucketMedia = "GATEWAY_API_MEDIA"

// mediaPath starts the path of a link to a kept file.
const mediaPath = "/v1/media/"

const (
	// defaultMediaTTL is how long a link works: a day, as long as the
	// attachment store keeps a file by default.
	defaultMediaTTL = 24 * time.Hour
	// defaultMediaMaxBytes bounds a file served: the attachment store's
	// bound of one file.
	defaultMediaMaxBytes = 20 << 20
	// defaultMediaLinksMaxBytes bounds the bucket: a record is a few
	// hundred bytes, so this keeps tens of thousands of links; when it
	// is full, the oldest go first.
	defaultMediaLinksMaxBytes = 16 << 20
	// minMediaLinksMaxBytes is the least bound: room for a few dozen
	// records with long file names.
	minMediaLinksMaxBytes = 64 << 10
	// defaultMediaStallTimeout bounds a download's wait for its client
	// to take the next chunk.
	defaultMediaStallTimeout = 30 * time.Second
	// mediaFullWarnEvery spaces the warnings that the bucket is full.
	mediaFullWarnEvery = 10 * time.Minute
)

// mediaIDPattern is a link id: 32 hex digits.
var mediaIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// validateMedia checks the keys of the links to kept files.
func (c Config) validateMedia() error {
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return config.Invalid("gateways.api.public_url", c.PublicURL, "an http(s) URL without query or fragment (https://agent.example.com)")
		}
	}
	if c.MediaTTL < 0 {
		return config.Invalid("gateways.api.media_ttl", c.MediaTTL, "a positive duration")
	}
	if c.MediaMaxBytes < 0 {
		return config.Invalid("gateways.api.media_max_bytes", c.MediaMaxBytes, "a positive number of bytes")
	}
	if c.MediaStallTimeout < 0 {
		return config.Invalid("gateways.api.media_stall_timeout", c.MediaStallTimeout, "a positive duration")
	}
	if c.MediaLinksMaxBytes != 0 && c.MediaLinksMaxBytes < minMediaLinksMaxBytes {
		return config.Invalid("gateways.api.media_links_max_bytes", c.MediaLinksMaxBytes, fmt.Sprintf("at least %d bytes", minMediaLinksMaxBytes))
	}
	return nil
}

// mediaLink is the record of a link to a kept file.
type mediaLink struct {
	// Ref is the file's name in the attachment store.
	Ref string `json:"ref"`
	// Owner is whose conversation the file was sent to: "key:<name>" for
	// a named key's, "" for the single key's (or a keyless gateway's).
	Owner    string `json:"owner,omitempty"`
	FileName string `json:"file_name,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	// Secret keys the signatures of the link's URL (signLink): random,
	// one per record, so it is shared by every replica (they read the
	// record) and dies with the record. A record an older replica wrote
	// has none: its link takes the header only.
	Secret string `json:"secret,omitempty"`
	// Expires is when the signed URL stops working (Unix seconds): the
	// record's own end, made media_ttl after it.
	Expires int64 `json:"expires,omitempty"`
}

type mediaLinkStore struct {
	kv  *kvBucket
	log *slog.Logger
	ttl time.Duration
	// warned is when the last warning that the bucket is full was logged
	// (Unix nanoseconds).
	warned atomic.Int64
}

func newMediaLinkStore(b *bus.Bus, log *slog.Logger, ttl time.Duration, maxBytes int64) *mediaLinkStore {
	return &mediaLinkStore{log: log, ttl: ttl, kv: &kvBucket{bus: b, discardOld: true, cfg: jetstream.KeyValueConfig{
		Bucket: BucketMedia, Description: "links of the API's answers to files in the attachment store", TTL: ttl, History: 1, MaxBytes: maxBytes,
	}}}
}

// recordOverhead is what a record costs the bucket besides its value:
// its subject ($KV.<bucket>.<id>) and the store's own header, roughly.
const recordOverhead = 128

// noteFull counts, and now and then logs, a record that the bucket
// makes room for by dropping its oldest: links that stop working before
// media_ttl. Its size is compared with the bucket's before it is
// written; replicas writing at once make the count approximate.
func (m *mediaLinkStore) noteFull(ctx context.Context, kv jetstream.KeyValue, size int) {
	st, err := kv.Status(ctx)
	if err != nil || int64(st.Bytes())+int64(size+recordOverhead) <= m.kv.cfg.MaxBytes {
		return
	}
	mediaLinksDropped.Inc()
	now := time.Now()
	last := m.warned.Load()
	if now.UnixNano()-last < int64(mediaFullWarnEvery) || !m.warned.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	m.log.WarnContext(ctx, "api media link bucket full: the oldest links stop working before media_ttl",
		"bucket_bytes", st.Bytes(), "max_bytes", m.kv.cfg.MaxBytes, "media_ttl", m.ttl,
		"hint", "raise gateways.api.media_links_max_bytes")
}

// keep stores link under id unless a record is there already (a send
// delivered again), and returns the record kept: the first one's secret
// and expiry, so that its URL, which an answer may already show, stays
// the one that works.
func (m *mediaLinkStore) keep(ctx context.Context, id string, link mediaLink) (mediaLink, error) {
	kv, err := m.kv.open(ctx)
	if err != nil {
		return mediaLink{}, err
	}
	link.Secret, link.Expires = randomHex(32), time.Now().Add(m.ttl).Unix()
	data, err := json.Marshal(link)
	if err != nil {
		return mediaLink{}, fmt.Errorf("encode media link: %w", err)
	}
	m.noteFull(ctx, kv, len(id)+len(data))
	_, err = kv.Create(ctx, id, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		kept, found, getErr := m.get(ctx, id)
		if getErr != nil || found {
			return kept, getErr
		}
		// It expired in between: this one is the record.
		_, err = kv.Put(ctx, id, data)
	}
	if err != nil {
		return mediaLink{}, fmt.Errorf("write media link: %w", err)
	}
	return link, nil
}

// signLink is the signature of link id's URL expiring at exp: an
// HMAC-SHA256, under the record's secret, of the id, the expiry and the
// owner, so that it opens that record's file only, for its owner's
// conversation, until exp.
func signLink(id string, link mediaLink, exp int64) string {
	mac := hmac.New(sha256.New, []byte(link.Secret))
	mac.Write([]byte("switchboard media link\x00" + id + "\x00" + strconv.FormatInt(exp, 10) + "\x00" + link.Owner))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// signedQuery is the query of link id's signed URL; "" for a record
// without a secret.
func signedQuery(id string, link mediaLink) string {
	if link.Secret == "" {
		return ""
	}
	return "?exp=" + strconv.FormatInt(link.Expires, 10) + "&sig=" + signLink(id, link, link.Expires)
}

// signatureValid reports whether a request's exp and sig sign link id
// and exp is not past. The signature is compared in constant time.
func signatureValid(id string, link mediaLink, q url.Values, now time.Time) bool {
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil || link.Secret == "" || now.Unix() > exp {
		return false
	}
	return hmac.Equal([]byte(q.Get("sig")), []byte(signLink(id, link, exp)))
}

// get returns the link id; found is false when there is none (never
// made, or expired).
func (m *mediaLinkStore) get(ctx context.Context, id string) (link mediaLink, found bool, err error) {
	if !mediaIDPattern.MatchString(id) {
		return mediaLink{}, false, nil
	}
	kv, err := m.kv.open(ctx)
	if err != nil {
		return mediaLink{}, false, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return mediaLink{}, false, nil
	}
	if err != nil {
		return mediaLink{}, false, fmt.Errorf("read media link: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &link); err != nil {
		return mediaLink{}, false, fmt.Errorf("decode media link: %w", err)
	}
	return link, true, nil
}

// ownerOfChat is whose an API chat is (chatIDOf): a named key's chat is
// "<name>.<session>", every other one the single key's. A single-key
// session of that form has a "~" before it, which no key name has.
func ownerOfChat(chat string) string {
	if name, _, ok := strings.Cut(chat, "."); ok && keyName.MatchString(name) {
		return namedPrefix + name
	}
	return ""
}

// ownerOf is the owner (ownerOfChat) of the chats of a client identity.
func ownerOf(identity string) string {
	if strings.HasPrefix(identity, namedPrefix) {
		return identity
	}
	return ""
}

// linkKept returns req with each of its attachments kept only in the
// attachment store linked instead (a URL of GET /v1/media/{id}), or req
// itself when it has none. The link id comes from the send's
// idempotency key, so a send delivered again links the same id.
func (s *Service) linkKept(ctx context.Context, req *deliveryv1.SendRequested) (*deliveryv1.SendRequested, error) {
	kept := false
	for _, a := range req.GetAttachments() {
		kept = kept || (a.GetBytesRef() != "" && a.GetUnavailable() == "")
	}
	if !kept || len(req.GetInputMessageIds()) == 0 {
		return req, nil
	}
	out := proto.Clone(req).(*deliveryv1.SendRequested)
	owner := ownerOfChat(req.GetTarget().GetChatId())
	for i, a := range out.GetAttachments() {
		ref := a.GetBytesRef()
		if ref == "" || a.GetUnavailable() != "" {
			continue
		}
		id := randomHex(16)
		if key := req.GetIdempotencyKey(); key != "" {
			sum := sha256.Sum256([]byte("media\x00" + key + "\x00" + strconv.Itoa(i) + "\x00" + ref))
			id = hex.EncodeToString(sum[:16])
		}
		link, err := s.media.keep(ctx, id, mediaLink{Ref: ref, Owner: owner, FileName: a.GetFileName(), MimeType: a.GetMimeType()})
		if err != nil {
			return nil, err
		}
		a.Location = &eventsv1.Attachment_Url{Url: s.mediaURL(id) + signedQuery(id, link)}
	}
	return out, nil
}

// mediaURL is the link to kept file id: on gateways.api.public_url, else
// a path on the gateway's own address.
func (s *Service) mediaURL(id string) string {
	return strings.TrimRight(s.cfg.PublicURL, "/") + mediaPath + id
}

// isMediaPath reports whether u is a link linkKept made without a public
// URL: a path on the gateway's own address.
func isMediaPath(u *url.URL) bool {
	return u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, mediaPath) && mediaIDPattern.MatchString(strings.TrimPrefix(u.Path, mediaPath))
}

// getMedia serves GET (and HEAD) /v1/media/{id}: the bytes of a file
// an answer linked, to the client whose conversation it was sent to —
// a request with its key, or one without an Authorization header whose
// URL carries the link's signature (what a browser opens: an <img src>,
// a click in a chat UI). Another client's link, an expired one, one
// never made and a bad or expired signature are alike: 404
// media_not_found, which tells nothing of whether the link exists. A
// link whose file the attachment store no longer keeps is 410
// media_expired; a file over media_max_bytes 413 media_too_large,
// before a byte is sent. The file is streamed from the store as the
// client reads it, never held whole; a Range is not served (the store
// reads a file from its start only), the whole file is.
func (s *Service) getMedia(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" && r.URL.Query().Has("sig") {
		s.getSignedMedia(w, r)
		return
	}
	s.authed(s.getKeyedMedia)(w, r)
}

// getKeyedMedia serves a kept file to a request with the key of the
// conversation it was sent to.
func (s *Service) getKeyedMedia(w http.ResponseWriter, r *http.Request) {
	id, link, ok := s.mediaLink(w, r)
	if !ok {
		return
	}
	if link.Owner != ownerOf(identityOf(r)) {
		writeMediaNotFound(w, id)
		return
	}
	s.serveKept(w, r, link)
}

// getSignedMedia serves a kept file to a request its URL's signature
// lets in. The record is still read: a link whose record was deleted,
// expired or dropped (media_links_max_bytes) is 404 whatever its
// signature says, and the signature covers the record's owner. Such
// requests are rate limited per link, apart from the keys: only a link
// whose record is kept gets a limiter, so that a stranger's made-up ids
// do not fill the limiters' map.
func (s *Service) getSignedMedia(w http.ResponseWriter, r *http.Request) {
	id, link, ok := s.mediaLink(w, r)
	if !ok {
		return
	}
	if ok, after := s.linkLimiter.allow(id); !ok {
		writeRateLimited(w, after)
		return
	}
	if !signatureValid(id, link, r.URL.Query(), time.Now()) {
		writeMediaNotFound(w, id)
		return
	}
	s.serveKept(w, r, link)
}

// mediaLink reads the record of the link the URL names. It answers the
// request itself (404 for none, 503) and returns false when there is no
// record to go on with.
func (s *Service) mediaLink(w http.ResponseWriter, r *http.Request) (id string, link mediaLink, ok bool) {
	id = r.PathValue("id")
	link, found, err := s.media.get(r.Context(), id)
	if err != nil {
		s.log.WarnContext(r.Context(), "read api media link failed", "err", err)
		writeUnavailable(w)
		return id, mediaLink{}, false
	}
	if !found {
		writeMediaNotFound(w, id)
		return id, mediaLink{}, false
	}
	return id, link, true
}

// writeMediaNotFound answers a link that is not the client's to open.
func writeMediaNotFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "invalid_request_error", "media_not_found", "",
		"File not found, or its link expired: "+openai.Clip(id, 64))
}

// serveKept answers with the file link names: its headers, then, for a
// GET, its bytes as they come from the store, each chunk within
// media_stall_timeout of the last (copyKept). A HEAD reads the file's
// record only, not the file, so it does not check the file's checksum:
// a damaged file answers HEAD as a whole one, and its GET ends short.
func (s *Service) serveKept(w http.ResponseWriter, r *http.Request, link mediaLink) {
	limit := cmp.Or(s.cfg.MediaMaxBytes, defaultMediaMaxBytes)
	var (
		body io.Reader
		size int64
		kept string
		err  error
	)
	if r.Method == http.MethodHead {
		size, kept, err = s.files.Info(r.Context(), link.Ref)
		if err == nil && size > limit {
			err = attachment.ErrTooLarge
		}
	} else {
		var obj *attachment.Object
		if obj, err = s.files.Reader(r.Context(), link.Ref, limit); err == nil {
			defer func() { _ = obj.Close() }()
			body, size, kept = obj, obj.Size, obj.MimeType
		}
	}
	switch {
	case errors.Is(err, attachment.ErrNotFound):
		writeError(w, http.StatusGone, "invalid_request_error", "media_expired", "",
			"The file is no longer kept: the attachment store keeps files for attachments.ttl.")
		return
	case errors.Is(err, attachment.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "media_too_large", "",
			fmt.Sprintf("The file is larger than this gateway serves (%s, gateways.api.media_max_bytes).", attachment.Size(limit)))
		return
	case err != nil:
		s.log.WarnContext(r.Context(), "read api media failed", "err", err)
		writeUnavailable(w)
		return
	}
	mimeType := cmp.Or(link.MimeType, kept)
	switch {
	case mimeType != "":
	case body != nil:
		// The type from the file's first bytes, which are sent still.
		br := bufio.NewReaderSize(body, sniffLen)
		head, _ := br.Peek(sniffLen)
		mimeType, body = http.DetectContentType(head), br
	default:
		// HEAD: the same type a GET names.
		head, _, _, _ := s.files.Head(r.Context(), link.Ref, sniffLen)
		mimeType = http.DetectContentType(head)
	}
	writeMediaHeaders(w, link, mimeType, size)
	w.WriteHeader(http.StatusOK)
	if body == nil {
		return
	}
	if err := copyKept(w, body, cmp.Or(s.cfg.MediaStallTimeout, defaultMediaStallTimeout)); err != nil && r.Context().Err() == nil {
		// The headers are sent: the client sees the body end short of
		// its Content-Length, as the server closes the connection.
		s.log.WarnContext(r.Context(), "stream api media failed", "err", err)
	}
}

// copyKept writes a kept file's bytes to w as they come, each write due
// within stall: a client that stops reading has its download ended
// (the write fails at the deadline, the connection closes, and the
// caller's Close of the file ends its chunk pulls) instead of holding it
// open for ever. The last bytes are flushed within stall too.
func copyKept(w http.ResponseWriter, body io.Reader, stall time.Duration) error {
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if err := rc.SetWriteDeadline(time.Now().Add(stall)); err != nil {
				return fmt.Errorf("set media write deadline: %w", err)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return fmt.Errorf("write media: %w", err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			// The last bytes may still be in the response's buffers:
			// they go out while a deadline holds, not after the handler
			// returns with none, where a client that stopped reading
			// would hold the connection for ever.
			if err := rc.SetWriteDeadline(time.Now().Add(stall)); err != nil {
				return fmt.Errorf("set media write deadline: %w", err)
			}
			if err := rc.Flush(); err != nil {
				return fmt.Errorf("flush media: %w", err)
			}
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read media: %w", rerr)
		}
	}
}

// sniffLen is how much of a file of no known type is read to name it
// (http.DetectContentType reads at most 512 bytes).
const sniffLen = 512

// writeMediaHeaders sets the headers of a kept file's answer. Only a
// picture a browser shows as a picture is shown: anything else (an HTML
// or SVG file) is downloaded, never rendered on the gateway's origin,
// where the web chat keeps its key.
func writeMediaHeaders(w http.ResponseWriter, link mediaLink, mimeType string, size int64) {
	disposition := "attachment"
	if attachment.IsImageType(mimeType) {
		disposition = "inline"
	}
	params := map[string]string{}
	if link.FileName != "" {
		params["filename"] = link.FileName
	}
	if cd := mime.FormatMediaType(disposition, params); cd != "" {
		disposition = cd
	}
	h := w.Header()
	h.Set("Content-Type", mimeType)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Content-Disposition", disposition)
	h.Set("Cache-Control", "private, max-age=300")
	h.Set("Accept-Ranges", "none")
}
