// Package codeshape checks rules of the code's shape that no compiler
// checks: pkg/ never leans on internal/, the scheduler and approver
// binaries link no worker, embedded server or model SDK, and no
// non-test function runs over 80 lines.
package codeshape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// root is the module's root, two folders up from this package.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", r, err)
	}
	return r
}

// goFiles parses every .go file under dir (tests too when withTests),
// skipping testdata and modules of their own below the root.
func goFiles(t *testing.T, dir string, withTests bool, mode parser.Mode) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" || (p != dir && fileExists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || (!withTests && strings.HasSuffix(p, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, mode)
		if err != nil {
			return err
		}
		files[p] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s", dir)
	}
	return fset, files
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestPkgImportsNoInternal: a package under pkg/ imports no internal
// package of the module, internal/ or pkg/internal/ alike: what a user
// imports stands on public packages only (its tests may: they use the
// repository's harness).
func TestPkgImportsNoInternal(t *testing.T) {
	_, files := goFiles(t, filepath.Join(root(t), "pkg"), false, parser.ImportsOnly)
	for p, f := range files {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			own := strings.HasPrefix(path, "github.com/durable-run/durable/")
			if own && (strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")) {
				t.Errorf("%s imports %s", p, path)
			}
		}
	}
}

// TestNoLongFunctions: no non-test function or function literal is
// longer than 80 lines.
func TestNoLongFunctions(t *testing.T) {
	const most = 80
	fset, files := goFiles(t, root(t), false, 0)
	for p, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch x := n.(type) {
			case *ast.FuncDecl:
				body, name = x.Body, x.Name.Name
			case *ast.FuncLit:
				body = x.Body
			}
			if body == nil {
				return true
			}
			start := fset.Position(n.Pos())
			if lines := fset.Position(body.End()).Line - start.Line + 1; lines > most {
				t.Errorf("%s:%d: %s is %d lines, want at most %d", p, start.Line, name, lines, most)
			}
			return true
		})
	}
}

// TestBinariesLinkWhatTheyRun: the scheduler and the approver link no
// worker, no embedded nats-server and no model SDK.
func TestBinariesLinkWhatTheyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	forbidden := []string{
		"github.com/nats-io/nats-server/v2/server",
		"github.com/durable-run/durable/pkg/worker",
		"github.com/anthropics/anthropic-sdk-go",
		"github.com/openai/openai-go",
	}
	for _, cmd := range []string{"./cmd/scheduler", "./cmd/approver"} {
		c := exec.Command("go", "list", "-deps", cmd)
		c.Dir = root(t)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", cmd, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed %d packages", cmd, len(deps))
		}
		for _, d := range deps {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s links %s", cmd, d)
				}
			}
		}
	}
}

// TestBinariesKeepMethodElimination: no binary links html/template or
// text/template (golang.org/x/net/trace brings them in with
// google.golang.org/grpc): a reachable template call keeps every exported
// method of every type, and the worker doubled to 126 MB when the OTLP
// exporters linked gRPC (pkg/service/otlp.go is why they do not).
func TestBinariesKeepMethodElimination(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	c := exec.Command("go", "list", "-deps", "./cmd/durable", "./cmd/worker", "./cmd/scheduler", "./cmd/approver")
	c.Dir = root(t)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		switch d {
		case "text/template", "html/template", "golang.org/x/net/trace", "google.golang.org/grpc":
			t.Errorf("a binary links %s", d)
		}
	}
}
