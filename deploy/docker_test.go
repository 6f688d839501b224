package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// instruction is one Dockerfile instruction with continuations joined.
type instruction struct {
	cmd, args string
}

func readDockerfile(t *testing.T) [][]instruction {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]instruction
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s: %s before the first FROM", Dockerfile, in.cmd)
			}
			return
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a minimal final stage", len(stages))
	}
	build := strings.Join(flatten(stages[0]), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "--mount=type=cache,target=/go/pkg/mod", "--mount=type=cache,target=/root/.cache/go-build", "./cmd/switchboard", "-trimpath"} {
		if !strings.Contains(build, want) {
			t.Errorf("build stage lacks %q", want)
		}
	}
	final := stages[len(stages)-1]
	base := strings.Fields(final[0].args)[0]
	distroless := strings.HasPrefix(base, "gcr.io/distroless/static") && strings.HasSuffix(base, ":nonroot")
	finalText := strings.Join(flatten(final), "\n")
	if !distroless {
		if base != "scratch" {
			t.Fatalf("final image %s: want distroless static nonroot or scratch", base)
		}
		for _, want := range []string{"ca-certificates.crt", "zoneinfo"} {
			if !strings.Contains(finalText, want) {
				t.Errorf("scratch image without %s", want)
			}
		}
	}
	var user, entrypoint string
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "RUN":
			t.Errorf("RUN in the final stage: the image has no shell")
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("final stage USER %q: want a non-root user", user)
	}
	if entrypoint != `["/usr/local/bin/switchboard"]` {
		t.Errorf("ENTRYPOINT %s: compose health checks call /usr/local/bin/switchboard", entrypoint)
	}
	if !strings.Contains(finalText, "COPY --from=build /out/switchboard /usr/local/bin/switchboard") {
		t.Error("final stage does not copy the binary to /usr/local/bin/switchboard")
	}
}

func flatten(ins []instruction) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.cmd + " " + in.args
	}
	return out
}

// TestDockerignoreKeepsTheBuildInputs: .dockerignore, read with Docker's
// own pattern matcher, keeps every file `go build ./cmd/switchboard` reads
// and drops secrets and bulk.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	t.Parallel()
	r := root(t)
	f, err := os.Open(filepath.Join(r, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(rel string) bool {
		m, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	needed := []string{"go.mod", "go.sum", "go.work", "go.work.sum"}
	needed = append(needed, buildInputs(t, r)...)
	if len(needed) < 20 {
		t.Fatalf("only %d build inputs found: is go list broken?", len(needed))
	}
	for _, rel := range needed {
		if ignored(rel) {
			t.Errorf(".dockerignore drops %s, which the build needs", rel)
		}
	}
	for _, rel := range []string{".git", ".env", "bin/switchboard", "switchboard", "pkg/bus/bus_test.go", "deploy/k8s/base/kustomization.yaml"} {
		if !ignored(rel) {
			t.Errorf(".dockerignore keeps %s in the build context", rel)
		}
	}
}

// buildInputs lists, relative to root, the Go and embedded files of the
// module's packages that cmd/switchboard depends on.
func buildInputs(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,GoFiles,EmbedFiles,Module", "./cmd/switchboard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	var files []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir        string
			GoFiles    []string
			EmbedFiles []string
			Module     *struct{ Main bool }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			rel, err := filepath.Rel(root, filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, rel)
		}
	}
	return files
}
