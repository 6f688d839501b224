// Package attachment keeps the bytes of users' attachments in a JetStream
// object store, so that bus events carry only a reference to them: when a
// turn runs a message, the platform's gateway, which holds the platform's
// credentials, downloads a photo, a voice message or a text file once, at
// the worker's request, and the worker reads it back for the model.
package attachment

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/egress"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Bucket is the object store's name (before the topology prefix).
const Bucket = "ATTACHMENTS"

// Config bounds what the gateways keep.
type Config struct {
	// Enabled: gateways download the attachments the agent reads (images)
	// and the worker shows them to the model. Off, the model sees only a
	// line naming each attachment.
	Enabled bool `koanf:"enabled"`
	// MaxBytes bounds one attachment (default 20 MiB, Telegram's download
	// limit for bots); a larger one is named to the model as too large.
	MaxBytes int64 `koanf:"max_bytes"`
	// TTL is how long the bytes are kept (default 24 h): long enough for a
	// turn queued behind others, or retried after a crash, to read them.
	TTL time.Duration `koanf:"ttl"`
	// StoreBytes bounds the whole store (default 1 GiB); when it is full a
	// new attachment is named to the model as unavailable until old ones
	// expire. JetStream reserves it on every NATS server that holds a
	// replica of the store.
	StoreBytes int64 `koanf:"store_bytes"`
	// URLs is what the gateways' downloads of an answer's attachments by
	// URL (a remote agent's, a proactive send's) may reach besides public
	// addresses; by default nothing else. It applies whether or not the
	// store is enabled.
	URLs egress.Config `koanf:"urls"`
}

// DefaultConfig is on, 20 MiB per file, kept a day, 1 GiB in all.
func DefaultConfig() Config {
	return Config{Enabled: true, MaxBytes: 20 << 20, TTL: 24 * time.Hour, StoreBytes: 1 << 30}
}

// memoryStoreBytes bounds a store kept in memory (tests' topologies):
// JetStream reserves the whole bound in RAM.
const memoryStoreBytes = 64 << 20

// Validate checks the bounds.
func (c Config) Validate() error {
	switch {
	case c.MaxBytes < 0, c.StoreBytes < 0, c.TTL < 0:
		return errors.New("attachments: max_bytes, store_bytes and ttl must not be negative")
	case c.StoreBytes > 0 && c.MaxBytes > c.StoreBytes:
		return fmt.Errorf("attachments: max_bytes (%d) is larger than store_bytes (%d)", c.MaxBytes, c.StoreBytes)
	}
	if err := c.URLs.Validate(); err != nil {
		return fmt.Errorf("attachments.urls: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBytes == 0 {
		c.MaxBytes = d.MaxBytes
	}
	if c.TTL == 0 {
		c.TTL = d.TTL
	}
	if c.StoreBytes == 0 {
		c.StoreBytes = d.StoreBytes
	}
	return c
}

// Wanted reports whether the agent reads a's bytes, so a gateway should
// keep them: pictures (shown to the model), voice messages and audio
// (transcribed) and text documents (read into the message).
func Wanted(a *eventsv1.Attachment) bool {
	switch a.GetKind() {
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE:
		// HEIC, SVG …: no provider takes them, nor are they converted.
		return a.GetMimeType() == "" || IsPictureType(a.GetMimeType())
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO:
		return true
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT:
		return IsPictureType(a.GetMimeType()) || IsTextDocument(a)
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER:
		return IsPictureType(a.GetMimeType()) // static ones: animated ones are Lottie or video
	}
	return false
}

// textTypes are the media types besides text/* whose content is text.
var textTypes = map[string]bool{
	"application/json": true, "application/xml": true, "application/yaml": true, "application/x-yaml": true,
	"application/toml": true, "application/javascript": true, "application/x-sh": true, "application/sql": true,
	"application/csv": true, "application/x-ndjson": true, "application/ld+json": true,
}

// textExts are file extensions of text, for platforms that send a
// generic media type (application/octet-stream) or none.
var textExts = map[string]bool{
	".txt": true, ".md": true, ".markdown": true, ".csv": true, ".tsv": true, ".json": true, ".jsonl": true,
	".yaml": true, ".yml": true, ".toml": true, ".xml": true, ".html": true, ".htm": true, ".log": true,
	".ini": true, ".cfg": true, ".conf": true, ".env": true, ".sql": true, ".sh": true, ".py": true, ".go": true,
	".js": true, ".ts": true, ".tsx": true, ".jsx": true, ".java": true, ".kt": true, ".c": true, ".h": true,
	".cpp": true, ".hpp": true, ".cs": true, ".rb": true, ".rs": true, ".php": true, ".swift": true, ".css": true,
	".tex": true, ".rst": true, ".srt": true, ".vtt": true,
}

// IsTextDocument reports whether a is a document whose content is text,
// by its media type or, failing a specific one, its file name.
func IsTextDocument(a *eventsv1.Attachment) bool {
	if a.GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT {
		return false
	}
	mime, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(a.GetMimeType())), ";")
	if strings.HasPrefix(mime, "text/") || textTypes[mime] || strings.HasSuffix(mime, "+json") || strings.HasSuffix(mime, "+xml") {
		return true
	}
	if mime != "" && mime != "application/octet-stream" {
		return false
	}
	return textExts[strings.ToLower(path.Ext(a.GetFileName()))]
}

// IsImageType reports whether mime names an image format the model
// providers take (PNG, JPEG, GIF, WebP).
func IsImageType(mime string) bool {
	mime, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(mime)), ";")
	switch mime {
	case "image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp":
		return true
	}
	return false
}

// IsPictureType reports whether mime names a picture format the agent
// shows the model: one the providers take (IsImageType), or BMP or TIFF,
// which no provider takes and the worker encodes again as a PNG or JPEG
// (pkg/picture).
func IsPictureType(mime string) bool {
	if IsImageType(mime) {
		return true
	}
	mime, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(mime)), ";")
	switch strings.TrimSpace(mime) {
	case "image/bmp", "image/x-bmp", "image/x-ms-bmp", "image/tiff":
		return true
	}
	return false
}

// otherPictureExts are picture formats besides JPEG and PNG, by file
// extension.
var otherPictureExts = map[string]bool{".gif": true, ".webp": true, ".bmp": true, ".svg": true, ".tif": true, ".tiff": true,
	".heic": true, ".heif": true, ".avif": true, ".ico": true}

// IsJPEGOrPNG reports whether a picture is a JPEG or a PNG, the only
// formats WhatsApp's and LINE's image messages show: by its declared
// type, else (an image an answer shows, taken from its text by URL, has
// none) by its URL's extension not being another picture format's.
func IsJPEGOrPNG(a *eventsv1.Attachment) bool {
	mt, _, _ := strings.Cut(strings.ToLower(a.GetMimeType()), ";")
	switch strings.TrimSpace(mt) {
	case "image/jpeg", "image/jpg", "image/png":
		return true
	case "":
		u, err := url.Parse(a.GetUrl())
		return err == nil && !otherPictureExts[strings.ToLower(path.Ext(u.Path))]
	}
	return false
}

// Name is what the attachment at index i of an inbound event is kept
// under: the same for every delivery of the event and every attempt of its
// turn, so a second fetch finds it kept.
func Name(platform, account, eventID string, i int) string {
	sum := sha256.Sum256([]byte(platform + ":" + account + ":" + eventID))
	return hex.EncodeToString(sum[:20]) + "." + strconv.Itoa(i)
}

// ErrTooLarge is returned for an attachment over Config.MaxBytes.
var ErrTooLarge = errors.New("attachment too large")

// ErrNotFound is returned for a reference the store does not hold (it
// expired, or was never kept).
var ErrNotFound = errors.New("attachment not found")

// Store reads and writes the object store. Gateways create the bucket
// (New, then Keep or Stat); workers only open it (Open), so that one
// process's settings decide its bounds.
type Store struct {
	js   jetstream.JetStream
	topo bus.Topology
	cfg  Config
	// opens: the bucket is never created or changed (Open).
	opens bool

	mu  sync.Mutex
	obs jetstream.ObjectStore
}

// New returns a Store over js that creates the bucket with cfg's bounds,
// or brings an existing one to them; nothing is opened until first use.
func New(js jetstream.JetStream, topo bus.Topology, cfg Config) *Store {
	return &Store{js: js, topo: topo, cfg: cfg.withDefaults()}
}

// Open returns a Store over the bucket the gateways create: it never
// creates it or changes its bounds (its Keep returns ErrNotFound until a
// gateway created it). cfg bounds only what this Store reads and keeps.
func Open(js jetstream.JetStream, topo bus.Topology, cfg Config) *Store {
	s := New(js, topo, cfg)
	s.opens = true
	return s
}

// Config is the store's configuration with its defaults.
func (s *Store) Config() Config { return s.cfg }

// bucket opens the object store, creating or updating it when create is
// set and the Store does not only open it. It is kept once opened.
func (s *Store) bucket(ctx context.Context, create bool) (jetstream.ObjectStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obs != nil {
		return s.obs, nil
	}
	var (
		obs jetstream.ObjectStore
		err error
	)
	if create && !s.opens {
		limit := s.cfg.StoreBytes
		if s.topo.Storage == jetstream.MemoryStorage {
			limit = min(limit, memoryStoreBytes)
		}
		obs, err = s.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: s.topo.Stream(Bucket), Description: "users' attachments, read by the agent",
			TTL: s.cfg.TTL, MaxBytes: limit, Storage: s.topo.Storage, Replicas: max(s.topo.Replicas, 1),
		})
	} else {
		obs, err = s.js.ObjectStore(ctx, s.topo.Stream(Bucket))
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, ErrNotFound
		}
	}
	if err != nil {
		return nil, fmt.Errorf("attachment store: %w", err)
	}
	s.obs = obs
	return obs, nil
}

// Keep stores the bytes r yields under name, reading at most MaxBytes,
// and returns how many it stored.
func (s *Store) Keep(ctx context.Context, name, mime string, r io.Reader) (int64, error) {
	obs, err := s.bucket(ctx, true)
	if err != nil {
		return 0, err
	}
	lr := &limitReader{r: r, left: s.cfg.MaxBytes}
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: mime}, lr)
	if lr.over {
		return 0, ErrTooLarge
	}
	if err != nil {
		return 0, fmt.Errorf("store attachment: %w", err)
	}
	return int64(info.Size), nil
}

// Stat reports the size and media type of the object stored under name,
// if there is one (an attachment asked for again need not be downloaded
// again): Info, with any error read as none.
func (s *Store) Stat(ctx context.Context, name string) (int64, string, bool) {
	size, mimeType, err := s.Info(ctx, name)
	return size, mimeType, err == nil
}

// Get returns the bytes stored under name and the media type they were
// stored with, refusing ones over limit bytes (0: MaxBytes).
func (s *Store) Get(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	obj, err := s.Reader(ctx, name, limit)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = obj.Close() }()
	var buf bytes.Buffer
	// Room for the EOF read too: a buffer filled to its capacity grows
	// (doubles) to look for more.
	buf.Grow(int(obj.Size) + bytes.MinRead)
	if _, err := buf.ReadFrom(obj); err != nil {
		return nil, "", fmt.Errorf("read attachment %s: %w", name, err)
	}
	return buf.Bytes(), obj.MimeType, nil
}

// Object is a file the store keeps, read as its chunks come from the
// bus: a reader of it holds a chunk or two, never the whole file.
type Object struct {
	io.ReadCloser
	// Size is the file's size in bytes, MimeType the media type it was
	// stored with.
	Size     int64
	MimeType string
}

// Reader returns a reader of the bytes stored under name, refusing ones
// over limit bytes (0: MaxBytes) before a chunk is read. The caller
// closes it. A file changed or damaged in the store fails the last Read
// (its digest does not match) before its last chunk is returned: the
// reader never has all of a damaged file's bytes. One deleted or
// replaced while it is read fails a Read with ErrNotFound, within
// chunkWait.
//
// The chunks are pulled from the store's stream as they are read, two
// ahead: the object store's own reader takes them as fast as the server
// sends them, so a slow reader (a download to a phone) would have most
// of a large file waiting in memory.
func (s *Store) Reader(ctx context.Context, name string, limit int64) (*Object, error) {
	if limit <= 0 {
		limit = s.cfg.MaxBytes
	}
	obs, err := s.bucket(ctx, false)
	if err != nil {
		return nil, err
	}
	info, err := obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("attachment %s: %w", name, err)
	}
	if int64(info.Size) > limit {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, info.Size, limit)
	}
	obj := &Object{Size: int64(info.Size), MimeType: info.Description}
	if info.Size == 0 {
		obj.ReadCloser = io.NopCloser(strings.NewReader(""))
		return obj, nil
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, fmt.Errorf("attachment %s: a link, which the store never makes", name)
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("attachment %s: %w", name, err)
	}
	bucket := s.topo.Stream(Bucket)
	stream := "OBJ_" + bucket
	cons, err := s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$O." + bucket + ".C." + info.NUID}, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("read attachment %s: %w", name, err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(2))
	if err != nil {
		return nil, fmt.Errorf("read attachment %s: %w", name, err)
	}
	obj.ReadCloser = &chunkReader{ctx: ctx, js: s.js, obs: obs, stream: stream, cons: cons, msgs: msgs,
		name: name, nuid: info.NUID, left: int64(info.Size), digest: sha256.New(), want: want}
	return obj, nil
}

// chunkWait is how long a read waits for a chunk before it looks
// whether the file is still kept: a file deleted or replaced while it
// is read has its chunks purged, which the read would otherwise wait
// for as long as its context lets it.
const chunkWait = 5 * time.Second

// chunkReader reads an object's chunks from the object store's stream.
type chunkReader struct {
	ctx    context.Context
	js     jetstream.JetStream
	obs    jetstream.ObjectStore
	stream string
	cons   jetstream.Consumer
	msgs   jetstream.MessagesContext
	name   string
	// nuid names the chunks of the object read: a new one is another
	// object under the same name.
	nuid string
	// buf is what is left of the chunk being read; left, the bytes of
	// the object still to come after it.
	buf    []byte
	left   int64
	digest hash.Hash
	want   []byte
	err    error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 && c.err == nil {
		if c.left <= 0 {
			c.err = io.EOF
			break
		}
		m, err := c.next()
		if err != nil {
			c.err = fmt.Errorf("read attachment %s: %w", c.name, err)
			break
		}
		data := m.Data()
		c.left -= int64(len(data))
		c.digest.Write(data)
		if c.left <= 0 && !bytes.Equal(c.digest.Sum(nil), c.want) {
			// The last chunk is held back: a reader given every byte
			// before the error (an HTTP client, against the answer's
			// Content-Length) would take the damaged file for whole.
			c.err = fmt.Errorf("read attachment %s: %w", c.name, jetstream.ErrDigestMismatch)
			break
		}
		c.buf = data
	}
	if len(c.buf) == 0 {
		return 0, c.err
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// next waits for the next chunk; ErrNotFound when the file was deleted
// or replaced while read, so its chunks will not come. The wait itself
// is one Next, for as long as the caller's context: shorter waits in a
// loop would each end before the consumer's heartbeat check, which
// recovers a consumer the server dropped.
func (c *chunkReader) next() (jetstream.Msg, error) {
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	go c.watch(ctx, cancel)
	m, err := c.msgs.Next(jetstream.NextContext(ctx))
	if err != nil && errors.Is(context.Cause(ctx), errGone) {
		return nil, fmt.Errorf("%w: deleted or replaced while read", ErrNotFound)
	}
	return m, err
}

// errGone ends the wait for a chunk of a file no longer kept.
var errGone = errors.New("gone")

// watch looks every chunkWait, until ctx ends, whether the file read is
// still kept, and ends ctx with errGone when it is not.
func (c *chunkReader) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(chunkWait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		info, err := c.obs.GetInfo(ctx, c.name)
		if errors.Is(err, jetstream.ErrObjectNotFound) || (err == nil && info.NUID != c.nuid) {
			cancel(errGone)
			return
		}
	}
}

// Close stops the reads and deletes the consumer at once (it would
// otherwise linger until its inactive threshold).
func (c *chunkReader) Close() error {
	c.msgs.Stop()
	if info := c.cons.CachedInfo(); info != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Second)
		defer cancel()
		if err := c.js.DeleteConsumer(ctx, c.stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("read attachment %s: end: %w", c.name, err)
		}
	}
	return nil
}

// Info returns the size and media type of what is stored under name,
// without reading it; ErrNotFound when nothing is.
func (s *Store) Info(ctx context.Context, name string) (int64, string, error) {
	obs, err := s.bucket(ctx, false)
	if err != nil {
		return 0, "", err
	}
	info, err := obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, "", ErrNotFound
	}
	if err != nil {
		return 0, "", fmt.Errorf("attachment %s: %w", name, err)
	}
	return int64(info.Size), info.Description, nil
}

// Head returns at most n bytes from the start of what is stored under
// name, the whole object's size and its media type: a long document is
// read only as far as it is used.
func (s *Store) Head(ctx context.Context, name string, n int64) ([]byte, int64, string, error) {
	obs, err := s.bucket(ctx, false)
	if err != nil {
		return nil, 0, "", err
	}
	res, err := obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, "", ErrNotFound
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("attachment %s: %w", name, err)
	}
	defer func() { _ = res.Close() }()
	info, err := res.Info()
	if err != nil {
		return nil, 0, "", fmt.Errorf("attachment %s: %w", name, err)
	}
	b, err := io.ReadAll(io.LimitReader(res, n))
	if err != nil {
		return nil, 0, "", fmt.Errorf("read attachment %s: %w", name, err)
	}
	return b, int64(info.Size), info.Description, nil
}

// limitReader fails once more than left bytes were read.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		l.over = true
		return 0, ErrTooLarge
	}
	return n, err
}

// Size writes n bytes for people: "900 bytes", "4.9 KB", "31.0 MB".
func Size(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// ParseDataURL decodes a data: URL (RFC 2397): base64, padded or not, or
// percent-encoded text. ok is false for any other URL.
func ParseDataURL(s string) (data []byte, mime string, ok bool, err error) {
	rest, found := strings.CutPrefix(s, "data:")
	if !found {
		return nil, "", false, nil
	}
	meta, payload, found := strings.Cut(rest, ",")
	if !found {
		return nil, "", true, errors.New("data URL without a comma")
	}
	mime, params, _ := strings.Cut(meta, ";")
	if !strings.Contains(";"+params+";", ";base64;") {
		text, err := url.PathUnescape(payload)
		return []byte(text), mime, true, err
	}
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(payload)
	}
	if err != nil {
		return nil, "", true, fmt.Errorf("data URL: %w", err)
	}
	return b, mime, true, nil
}
