package telemetry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spanStatusSetters are the span methods whose text the exporter sees
// as it is given: an error's text there keeps the chat and user ids it
// names, which SpanError takes out and a fixed Reason never has.
var spanStatusSetters = map[string]bool{"RecordError": true, "SetStatus": true}

// spanStatusAllowed are the files that may call them: the helpers.
var spanStatusAllowed = map[string]bool{"pkg/telemetry/spanerror.go": true}

// TestSpansFailOnlyThroughTheHelpers: no code in cmd, pkg or services
// (tests and generated code aside) sets a span's status or records an
// error on it directly; it goes through telemetry.SpanError,
// SpanMessageError or SpanFailed. The check is by method name, on the
// syntax alone: another type's method of one of these names would have
// to be allowed here.
func TestSpansFailOnlyThroughTheHelpers(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := 0
	for _, dir := range []string{"cmd", "pkg", "services"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := filepath.ToSlash(must(filepath.Rel(root, path)))
			if d.IsDir() {
				if rel == "pkg/gen" || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || spanStatusAllowed[rel] {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files++
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && spanStatusSetters[sel.Sel.Name] {
					pos := fset.Position(call.Pos())
					t.Errorf("%s:%d: %s called directly: use telemetry.SpanError, SpanMessageError or SpanFailed",
						rel, pos.Line, sel.Sel.Name)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", dir, err)
		}
	}
	if files < 100 {
		t.Fatalf("checked %d files under %s, want the whole tree", files, root)
	}
}

// moduleRoot is the directory of the module's go.mod, above this
// package's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir := must(os.Getwd())
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
