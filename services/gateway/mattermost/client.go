package mattermost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxResponseBytes bounds a REST answer the client decodes (a page of
// posts is the largest).
const maxResponseBytes = 8 << 20

// client is a small client of Mattermost's REST API v4: the calls the
// gateway makes, with the bot's token as a bearer token.
type client struct {
	base  string // server URL without a trailing slash
	token string
	hc    *http.Client
}

// apiError is a REST call's failure as the server answered it: the HTTP
// status, Mattermost's error id and message ({"id","message",
// "status_code"}) and, for a 429, how long to wait.
type apiError struct {
	Op         string
	Status     int
	ID         string
	Message    string
	RetryAfter time.Duration
}

func (e *apiError) Error() string {
	msg := e.Message
	if e.ID != "" {
		msg = e.ID + ": " + msg
	}
	return fmt.Sprintf("mattermost %s: HTTP %d: %s", e.Op, e.Status, msg)
}

// user is the part of a Mattermost user the gateway reads.
type user struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Nickname string `json:"nickname"`
	First    string `json:"first_name"`
	Last     string `json:"last_name"`
	IsBot    bool   `json:"is_bot"`
}

// fileInfo describes an uploaded or attached file.
type fileInfo struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Extension string `json:"extension"`
	Size      int64  `json:"size"`
	MimeType  string `json:"mime_type"`
}

// postList is the answer of GET /channels/{id}/posts.
type postList struct {
	Order []string         `json:"order"`
	Posts map[string]*post `json:"posts"`
}

// newPost is the body of POST /posts.
type newPost struct {
	ChannelID     string   `json:"channel_id"`
	Message       string   `json:"message"`
	RootID        string   `json:"root_id,omitempty"`
	FileIDs       []string `json:"file_ids,omitempty"`
	PendingPostID string   `json:"pending_post_id,omitempty"`
	// Props: sendProp, the send the post is for.
	Props map[string]string `json:"props,omitempty"`
}

func (c *client) url(path string) string { return c.base + "/api/v4" + path }

// do calls the API and decodes a 2xx JSON answer into out (nil: the
// body is dropped).
func (c *client) do(ctx context.Context, op, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("mattermost %s: encode: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), rd)
	if err != nil {
		return fmt.Errorf("mattermost %s: %w", op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(req, op, out)
}

func (c *client) send(req *http.Request, op string, out any) error {
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("X-Requested-With", "XMLHttpRequest")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("mattermost %s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return responseError(op, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBytes)).Decode(out); err != nil {
		return fmt.Errorf("mattermost %s: decode answer: %w", op, err)
	}
	return nil
}

// responseError reads a failed answer's Mattermost error and, for a 429,
// the wait it names.
func responseError(op string, resp *http.Response) error {
	e := &apiError{Op: op, Status: resp.StatusCode}
	var body struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &body) == nil && (body.ID != "" || body.Message != "") {
		e.ID, e.Message = body.ID, body.Message
	} else {
		e.Message = strings.TrimSpace(string(raw))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200]
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = retryAfter(resp.Header, time.Now())
	}
	return e
}

// retryAfter reads how long a 429 asks to wait: X-Ratelimit-Reset
// (seconds until the bucket refills, as Mattermost sends it), else
// Retry-After (seconds), else 1 s.
func retryAfter(h http.Header, now time.Time) time.Duration {
	for _, name := range []string{"X-Ratelimit-Reset", "Retry-After"} {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		if n > 1_000_000_000 {
			// A Unix time rather than a number of seconds.
			if d := time.Unix(n, 0).Sub(now); d > 0 {
				return d
			}
			continue
		}
		return max(time.Duration(n)*time.Second, time.Second)
	}
	return time.Second
}

func (c *client) me(ctx context.Context) (*user, error) {
	var u user
	if err := c.do(ctx, "users/me", http.MethodGet, "/users/me", nil, &u); err != nil {
		return nil, err
	}
	if u.ID == "" {
		return nil, errors.New("mattermost users/me: answer without an id")
	}
	return &u, nil
}

func (c *client) user(ctx context.Context, id string) (*user, error) {
	var u user
	if err := c.do(ctx, "users/{id}", http.MethodGet, "/users/"+url.PathEscape(id), nil, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

func (c *client) createPost(ctx context.Context, p newPost) (*post, error) {
	var out post
	if err := c.do(ctx, "create post", http.MethodPost, "/posts", p, &out); err != nil {
		return nil, err
	}
	if out.ID == "" {
		return nil, errors.New("mattermost create post: answer without an id")
	}
	return &out, nil
}

func (c *client) patchPost(ctx context.Context, id, message string) error {
	return c.do(ctx, "patch post", http.MethodPut, "/posts/"+url.PathEscape(id)+"/patch", map[string]string{"message": message}, nil)
}

func (c *client) deletePost(ctx context.Context, id string) error {
	return c.do(ctx, "delete post", http.MethodDelete, "/posts/"+url.PathEscape(id), nil, nil)
}

func (c *client) typing(ctx context.Context, userID, channelID, parentID string) error {
	body := map[string]string{"channel_id": channelID}
	if parentID != "" {
		body["parent_id"] = parentID
	}
	return c.do(ctx, "typing", http.MethodPost, "/users/"+url.PathEscape(userID)+"/typing", body, nil)
}

func (c *client) addReaction(ctx context.Context, userID, postID, emoji string) error {
	body := map[string]string{"user_id": userID, "post_id": postID, "emoji_name": emoji}
	return c.do(ctx, "add reaction", http.MethodPost, "/reactions", body, nil)
}

func (c *client) removeReaction(ctx context.Context, userID, postID, emoji string) error {
	return c.do(ctx, "remove reaction", http.MethodDelete,
		"/users/"+url.PathEscape(userID)+"/posts/"+url.PathEscape(postID)+"/reactions/"+url.PathEscape(emoji), nil, nil)
}

// postsSince returns a channel's posts created or changed after since
// (Unix ms), the catch-up read after a reconnect.
func (c *client) postsSince(ctx context.Context, channelID string, since int64) (*postList, error) {
	var out postList
	path := "/channels/" + url.PathEscape(channelID) + "/posts?since=" + strconv.FormatInt(since, 10)
	if err := c.do(ctx, "channel posts", http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// upload stores a file in a channel (POST /files, multipart) and returns
// its id.
func (c *client) upload(ctx context.Context, channelID, name, mimeType string, data []byte) (string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	if err := w.WriteField("channel_id", channelID); err != nil {
		return "", err
	}
	h := make(map[string][]string)
	h["Content-Disposition"] = []string{mime.FormatMediaType("form-data", map[string]string{"name": "files", "filename": name})}
	h["Content-Type"] = []string{mimeType}
	part, err := w.CreatePart(h)
	if err != nil {
		return "", err
	}
	if _, err := part.Write(data); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/files"), &buf)
	if err != nil {
		return "", fmt.Errorf("mattermost upload: %w", err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	var out struct {
		FileInfos []fileInfo `json:"file_infos"`
	}
	if err := c.send(req, "upload", &out); err != nil {
		return "", err
	}
	if len(out.FileInfos) == 0 || out.FileInfos[0].ID == "" {
		return "", errors.New("mattermost upload: answer without a file")
	}
	return out.FileInfos[0].ID, nil
}

// describeFile asks a file's name, type and size (GET /files/{id}/info).
func (c *client) describeFile(ctx context.Context, id string) (*fileInfo, error) {
	var f fileInfo
	if err := c.do(ctx, "file info", http.MethodGet, "/files/"+url.PathEscape(id)+"/info", nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// file opens a file's bytes (GET /files/{id}). A 429 (with the
// Retry-After the server's rate limiter names) or a 5xx is asked again,
// three attempts in all within ctx, as Hermes retries media downloads
// (platform.Download); before, the first such answer lost the file to
// the turn.
func (c *client) file(ctx context.Context, id string) (*http.Response, error) {
	resp, err := platform.Download(ctx, c.hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/files/"+url.PathEscape(id)), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		return req, nil
	})
	if err != nil {
		return nil, fmt.Errorf("mattermost file: %w", err)
	}
	return resp, nil
}
