package attachment_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestStore(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A worker's reader opens the store a gateway creates: before that,
	// every reference is unknown.
	reader := attachment.New(b.JetStream(), b.Topology(), attachment.Config{})
	if _, _, err := reader.Get(ctx, "a", 0); !errors.Is(err, attachment.ErrNotFound) {
		t.Fatalf("get before the store exists: %v", err)
	}
	keeper := attachment.New(b.JetStream(), b.Topology(), attachment.Config{MaxBytes: 300 << 10})
	pic := bytes.Repeat([]byte("px"), 100<<10) // 200 KiB: two chunks
	n, err := keeper.Keep(ctx, "a", "image/png", bytes.NewReader(pic))
	if err != nil || n != int64(len(pic)) {
		t.Fatalf("keep: %d %v", n, err)
	}
	if size, mime, ok := keeper.Stat(ctx, "a"); !ok || size != int64(len(pic)) || mime != "image/png" {
		t.Fatalf("stat: %d %q %v", size, mime, ok)
	}
	if _, _, ok := keeper.Stat(ctx, "b"); ok {
		t.Fatal("stat of a name never kept")
	}
	data, mime, err := reader.Get(ctx, "a", 0)
	if err != nil || !bytes.Equal(data, pic) || mime != "image/png" {
		t.Fatalf("get: %d bytes, %q, %v", len(data), mime, err)
	}
	head, size, mime, err := reader.Head(ctx, "a", 10)
	if err != nil || !bytes.Equal(head, pic[:10]) || size != int64(len(pic)) || mime != "image/png" {
		t.Fatalf("head: %q %d %q %v", head, size, mime, err)
	}
	if _, _, _, err := reader.Head(ctx, "missing", 10); !errors.Is(err, attachment.ErrNotFound) {
		t.Fatalf("head of a missing name: %v", err)
	}
	if _, _, err := reader.Get(ctx, "a", 1000); !errors.Is(err, attachment.ErrTooLarge) {
		t.Fatalf("get over the reader's limit: %v", err)
	}
	if _, _, err := reader.Get(ctx, "missing", 0); !errors.Is(err, attachment.ErrNotFound) {
		t.Fatalf("get of a missing name: %v", err)
	}
	// Over MaxBytes: refused, and nothing is left under the name.
	if _, err := keeper.Keep(ctx, "big", "image/png", bytes.NewReader(make([]byte, 300<<10+1))); !errors.Is(err, attachment.ErrTooLarge) {
		t.Fatalf("keep over the limit: %v", err)
	}
	if _, _, ok := keeper.Stat(ctx, "big"); ok {
		t.Fatal("a refused attachment was kept")
	}
	// Exactly MaxBytes fits.
	if _, err := keeper.Keep(ctx, "edge", "image/png", bytes.NewReader(make([]byte, 300<<10))); err != nil {
		t.Fatalf("keep at the limit: %v", err)
	}
}

// Reader streams a kept file: it holds the chunk being read, not the
// file, so the store's read of it goes on until the reader reaches the
// end; a file over the limit is refused before a chunk is read.
func TestReaderStreams(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keeper := attachment.New(b.JetStream(), b.Topology(), attachment.Config{MaxBytes: 4 << 20})
	file := make([]byte, 2<<20) // 2 MiB: 16 chunks of 128 KiB
	for i := range file {
		file[i] = byte(i * 7)
	}
	if _, err := keeper.Keep(ctx, "big", "application/pdf", bytes.NewReader(file)); err != nil {
		t.Fatal(err)
	}
	if _, err := keeper.Keep(ctx, "empty", "text/plain", bytes.NewReader(nil)); err != nil {
		t.Fatal(err)
	}
	reader := attachment.Open(b.JetStream(), b.Topology(), attachment.Config{})
	st, err := b.JetStream().Stream(ctx, "OBJ_"+b.Topology().Stream(attachment.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	readers := func() int {
		t.Helper()
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	obj, err := reader.Reader(ctx, "big", 0)
	if err != nil || obj.Size != int64(len(file)) || obj.MimeType != "application/pdf" {
		t.Fatalf("reader: %+v %v", obj, err)
	}
	head := make([]byte, 1000)
	if _, err := io.ReadFull(obj, head); err != nil || !bytes.Equal(head, file[:1000]) {
		t.Fatalf("first bytes: %v", err)
	}
	// The store still has the rest to send: its read waits for ours.
	time.Sleep(200 * time.Millisecond)
	if n := readers(); n != 1 {
		t.Fatalf("%d reads of the store going on after the first bytes, want 1", n)
	}
	rest, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(append(head, rest...), file) {
		t.Fatalf("the rest: %d bytes, %v", len(rest), err)
	}
	if err := obj.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		limit int64
		err   error
	}{
		{"big", 1 << 20, attachment.ErrTooLarge},
		{"missing", 0, attachment.ErrNotFound},
	} {
		if _, err := reader.Reader(ctx, c.name, c.limit); !errors.Is(err, c.err) {
			t.Errorf("reader of %s (limit %d): %v, want %v", c.name, c.limit, err, c.err)
		}
	}
	// A refused file was never read from the store.
	if n := readers(); n != 0 {
		t.Errorf("%d reads of the store left going on", n)
	}
	obj, err = reader.Reader(ctx, "empty", 0)
	if err != nil || obj.Size != 0 {
		t.Fatalf("reader of an empty file: %+v %v", obj, err)
	}
	if data, err := io.ReadAll(obj); err != nil || len(data) != 0 {
		t.Fatalf("an empty file: %q %v", data, err)
	}
	_ = obj.Close()
	if size, mime, err := reader.Info(ctx, "big"); err != nil || size != int64(len(file)) || mime != "application/pdf" {
		t.Errorf("info: %d %q %v", size, mime, err)
	}
	if _, _, err := reader.Info(ctx, "missing"); !errors.Is(err, attachment.ErrNotFound) {
		t.Errorf("info of a missing name: %v", err)
	}
}

// A worker's Open keeps its own objects (derived copies) in the bucket a
// gateway created, without creating the bucket or changing its bounds.
func TestOpenNeverChangesTheBucket(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	worker := attachment.Open(b.JetStream(), b.Topology(), attachment.Config{})
	if _, err := worker.Keep(ctx, "a.fit", "image/jpeg", bytes.NewReader([]byte("jpeg"))); !errors.Is(err, attachment.ErrNotFound) {
		t.Fatalf("keep before a gateway created the store: %v", err)
	}
	if _, _, ok := worker.Stat(ctx, "a.fit"); ok {
		t.Fatal("stat before the store exists")
	}
	gateway := attachment.New(b.JetStream(), b.Topology(), attachment.Config{TTL: time.Hour})
	if _, err := gateway.Keep(ctx, "a", "image/png", bytes.NewReader([]byte("png"))); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Keep(ctx, "a.fit", "image/jpeg", bytes.NewReader([]byte("jpeg"))); err != nil {
		t.Fatalf("keep: %v", err)
	}
	if data, mime, err := gateway.Get(ctx, "a.fit", 0); err != nil || string(data) != "jpeg" || mime != "image/jpeg" {
		t.Fatalf("get: %q %q %v", data, mime, err)
	}
	obs, err := b.JetStream().ObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != time.Hour {
		t.Fatalf("the gateway's TTL became %v", st.TTL())
	}
}

func TestWanted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind eventsv1.AttachmentKind
		mime string
		name string
		want bool
	}{
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/heic", "", false}, // no provider takes it
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/webp", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/bmp", "", true}, // the worker shows it as a PNG
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/tiff", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/svg+xml", "", false},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "image/x-ms-bmp", "scan.bmp", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "image/TIFF", "scan.tif", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "image/PNG", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "image/jpeg; charset=binary", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/pdf", "report.pdf", false},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "text/markdown", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/json; charset=utf-8", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/vnd.api+json", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/octet-stream", "notes.MD", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "", "main.go", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "", "archive.zip", false},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/zip", "notes.txt", false}, // the type wins
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, "audio/ogg", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, "audio/mpeg", "song.mp3", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, "video/mp4", "clip.mp4", false},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, "image/webp", "", true},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, "application/x-tgsticker", "", false},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, "video/webm", "", false},
	}
	for _, tt := range tests {
		if got := attachment.Wanted(&eventsv1.Attachment{Kind: tt.kind, MimeType: tt.mime, FileName: tt.name}); got != tt.want {
			t.Errorf("%v %q %q: wanted %v", tt.kind, tt.mime, tt.name, got)
		}
	}
}

// The formats the providers take are shown as they are; BMP and TIFF
// are shown too, encoded again by the worker.
func TestPictureTypes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mime           string
		taken, picture bool
	}{
		{"image/png", true, true},
		{"image/jpg", true, true},
		{"IMAGE/WEBP; q=1", true, true},
		{"image/gif", true, true},
		{"image/bmp", false, true},
		{"image/x-ms-bmp", false, true},
		{"image/x-bmp", false, true},
		{" image/tiff ", false, true},
		{"image/svg+xml", false, false},
		{"image/heic", false, false},
		{"", false, false},
	} {
		if got := attachment.IsImageType(tt.mime); got != tt.taken {
			t.Errorf("IsImageType(%q) = %v", tt.mime, got)
		}
		if got := attachment.IsPictureType(tt.mime); got != tt.picture {
			t.Errorf("IsPictureType(%q) = %v", tt.mime, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  attachment.Config
		ok   bool
	}{
		{"defaults", attachment.DefaultConfig(), true},
		{"zero", attachment.Config{}, true},
		{"negative", attachment.Config{MaxBytes: -1}, false},
		{"file larger than the store", attachment.Config{MaxBytes: 10, StoreBytes: 5}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func TestIsJPEGOrPNG(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mime, url string
		want      bool
	}{
		{"image/jpeg", "https://x.example/a.gif", true}, // the declared type decides
		{"image/PNG; name=a.png", "", true},
		{"image/gif", "https://x.example/a.jpg", false},
		{"", "https://x.example/a.jpg", true},
		{"", "https://x.example/photo", true}, // no extension: taken for a photo
		{"", "https://x.example/a.WebP?size=2", false},
		{"", "https://x.example/a.gif", false},
		{"application/pdf", "https://x.example/a.png", false},
	} {
		a := &eventsv1.Attachment{MimeType: c.mime, Location: &eventsv1.Attachment_Url{Url: c.url}}
		if got := attachment.IsJPEGOrPNG(a); got != c.want {
			t.Errorf("IsJPEGOrPNG(%q, %q) = %v, want %v", c.mime, c.url, got, c.want)
		}
	}
}

// A file damaged in the store fails its reader before the reader has
// every byte: the last chunk is held back until the file's digest is
// checked, so a reader that counts its bytes (an HTTP client against
// the Content-Length) never takes a damaged file for whole.
func TestReaderWithholdsADamagedFilesEnd(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keeper := attachment.New(b.JetStream(), b.Topology(), attachment.Config{})
	for _, c := range []struct {
		name  string
		size  int
		chunk int // the chunk damaged, counted from the end
	}{
		{"two chunks, the last damaged", 200 << 10, 0},
		{"two chunks, the first damaged", 200 << 10, 1},
		{"one chunk", 1000, 0},
	} {
		file := bytes.Repeat([]byte("kept"), c.size/4)
		name := "damaged/" + strings.ReplaceAll(c.name, " ", "-")
		if _, err := keeper.Keep(ctx, name, "application/pdf", bytes.NewReader(file)); err != nil {
			t.Fatal(err)
		}
		damage(ctx, t, b, name, c.chunk)
		obj, err := keeper.Reader(ctx, name, 0)
		if err != nil {
			t.Fatalf("%s: reader: %v", c.name, err)
		}
		got, err := io.ReadAll(obj)
		_ = obj.Close()
		if !errors.Is(err, jetstream.ErrDigestMismatch) || len(got) >= len(file) {
			t.Errorf("%s: read %d of %d bytes, %v; want fewer, and a digest mismatch", c.name, len(got), len(file), err)
		}
		if _, _, err := keeper.Get(ctx, name, 0); !errors.Is(err, jetstream.ErrDigestMismatch) {
			t.Errorf("%s: get: %v", c.name, err)
		}
	}
}

// damage changes a byte of a kept file's chunk (from counts from the
// last chunk back) in the store, keeping its size and the digest it was
// kept with: the chunk is deleted and published again, changed.
func damage(ctx context.Context, t *testing.T, b *bus.Bus, name string, from int) {
	t.Helper()
	bucket := b.Topology().Stream(attachment.Bucket)
	obs, err := b.JetStream().ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.JetStream().Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	subject := "$O." + bucket + ".C." + info.NUID
	var chunks []*jetstream.RawStreamMsg
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, m)
		seq = m.Sequence
	}
	// Every chunk from the damaged one on goes again, in order.
	for i := len(chunks) - 1 - from; i < len(chunks); i++ {
		if err := st.DeleteMsg(ctx, chunks[i].Sequence); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(chunks) - 1 - from; i < len(chunks); i++ {
		data := bytes.Clone(chunks[i].Data)
		if i == len(chunks)-1-from {
			data[len(data)/2] ^= 0xff
		}
		if _, err := b.JetStream().Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
}

// A file deleted or replaced while it is read fails its reader soon:
// its chunks are purged, and the read does not wait for them for as
// long as its context lets it (a client's download would hang).
func TestReaderOfAFileGoneMidway(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keeper := attachment.New(b.JetStream(), b.Topology(), attachment.Config{MaxBytes: 4 << 20})
	file := bytes.Repeat([]byte("kept"), 512<<10) // 2 MiB: 16 chunks
	for _, c := range []struct {
		name string
		gone func(name string) error
	}{
		{"deleted", func(name string) error {
			obs, err := b.JetStream().ObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
			if err != nil {
				return err
			}
			return obs.Delete(ctx, name)
		}},
		{"replaced", func(name string) error {
			_, err := keeper.Keep(ctx, name, "text/plain", strings.NewReader("another"))
			return err
		}},
	} {
		name := "gone/" + c.name
		if _, err := keeper.Keep(ctx, name, "application/pdf", bytes.NewReader(file)); err != nil {
			t.Fatal(err)
		}
		obj, err := keeper.Reader(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(obj, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		if err := c.gone(name); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rest, err := io.ReadAll(obj)
		_ = obj.Close()
		if !errors.Is(err, attachment.ErrNotFound) || time.Since(start) > 20*time.Second {
			t.Errorf("%s midway: read %d more bytes in %v, %v; want ErrNotFound within 20s", c.name, len(rest), time.Since(start), err)
		}
	}
}
