package telegramfake

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestFiles(t *testing.T) {
	t.Parallel()
	const token = "77:secret"
	s, err := New(token, "filebot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	data := []byte("\xff\xd8\xffjpeg bytes")
	path := s.AddFile("f1", data)
	s.AddFile("huge", make([]byte, MaxDownload+1))

	get := func(t *testing.T, url string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}

	t.Run("getFile", func(t *testing.T) {
		tests := []struct {
			fileID   string
			wantCode int
			want     string // in the body
		}{
			{"f1", 200, `"file_path":"` + path + `"`},
			{"nope", 400, `"description":"Bad Request: invalid file_id"`},
			{"huge", 400, `"description":"Bad Request: file is too big"`},
			{"", 400, "file_id is empty"},
		}
		for _, tt := range tests {
			code, body := get(t, s.URL+"/bot"+token+"/getFile?file_id="+tt.fileID)
			if code != tt.wantCode || !strings.Contains(string(body), tt.want) {
				t.Errorf("getFile %q: %d %s, want %d with %s", tt.fileID, code, body, tt.wantCode, tt.want)
			}
		}
		_, body := get(t, s.URL+"/bot"+token+"/getFile?file_id=f1")
		var answer struct {
			OK     bool `json:"ok"`
			Result struct {
				FileID       string `json:"file_id"`
				FileUniqueID string `json:"file_unique_id"`
				FileSize     int    `json:"file_size"`
				FilePath     string `json:"file_path"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &answer); err != nil || !answer.OK || answer.Result.FileID != "f1" ||
			answer.Result.FileUniqueID == "" || answer.Result.FileSize != len(data) || answer.Result.FilePath != path {
			t.Fatalf("getFile answer %s (%v)", body, err)
		}
	})

	t.Run("download", func(t *testing.T) {
		tests := []struct {
			name     string
			url      string
			wantCode int
			want     []byte
		}{
			{"file", s.URL + "/file/bot" + token + "/" + path, 200, data},
			{"unknown path", s.URL + "/file/bot" + token + "/files/nope", 404, nil},
			{"wrong token", s.URL + "/file/bot77:other/" + path, 401, nil},
		}
		for _, tt := range tests {
			code, body := get(t, tt.url)
			if code != tt.wantCode || (tt.want != nil && !bytes.Equal(body, tt.want)) {
				t.Errorf("%s: %d %q, want %d %q", tt.name, code, body, tt.wantCode, tt.want)
			}
		}
		s.FailNextDownload(APIError{Code: 502, Description: "Bad Gateway"})
		if code, _ := get(t, s.URL+"/file/bot"+token+"/"+path); code != 502 {
			t.Errorf("failed download answered %d, want 502", code)
		}
		if code, _ := get(t, s.URL+"/file/bot"+token+"/"+path); code != 200 {
			t.Errorf("download after the failure answered %d, want 200", code)
		}
		if n := s.Downloads(); n != 5 {
			t.Errorf("%d downloads counted, want 5", n)
		}
	})

	t.Run("a file registered again replaces the old one", func(t *testing.T) {
		newPath := s.AddFile("f1", []byte("new"))
		if code, _ := get(t, s.URL+"/file/bot"+token+"/"+path); code != 404 {
			t.Errorf("old path answered %d, want 404", code)
		}
		if code, body := get(t, s.URL+"/file/bot"+token+"/"+newPath); code != 200 || string(body) != "new" {
			t.Errorf("new path answered %d %q", code, body)
		}
	})

	t.Run("InjectPhoto", func(t *testing.T) {
		id := s.InjectPhoto(map[string]any{"chat": map[string]any{"id": 5, "type": "private"}, "caption": "look"}, "f1")
		_, body := get(t, s.URL+"/bot"+token+"/getUpdates?timeout=0")
		var answer struct {
			Result []struct {
				UpdateID int64 `json:"update_id"`
				Message  struct {
					MessageID int    `json:"message_id"`
					Date      int64  `json:"date"`
					Caption   string `json:"caption"`
					Photo     []struct {
						FileID   string `json:"file_id"`
						Width    int    `json:"width"`
						FileSize int    `json:"file_size"`
					} `json:"photo"`
				} `json:"message"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &answer); err != nil || len(answer.Result) != 1 {
			t.Fatalf("getUpdates %s (%v)", body, err)
		}
		u := answer.Result[0]
		ph := u.Message.Photo
		if u.UpdateID != id || u.Message.MessageID == 0 || u.Message.Date == 0 || u.Message.Caption != "look" ||
			len(ph) != 2 || ph[1].FileID != "f1" || ph[1].Width <= ph[0].Width || ph[1].FileSize != 3 {
			t.Fatalf("update %s", body)
		}
	})
}
