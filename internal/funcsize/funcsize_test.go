// Package funcsize holds a lint check: no Go function outside tests grows past maxLines lines
// unless allow.txt names it, and allow.txt only shrinks (an entry whose function got shorter,
// or went away, must be removed). Long functions are split into named steps instead.
package funcsize

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxLines is the longest a function may be, from its func keyword to its closing brace.
const maxLines = 100

// long is one function over maxLines: its name ("pkg/pipeline.(*run).quantize", the folder
// from the module root and the receiver as Go prints it) and its length.
type long struct {
	name  string
	lines int
}

// longFuncs lists the functions over maxLines in the Go files under root, generated files
// and tests not (a table-driven test is long by its table).
func longFuncs(root string) ([]long, error) {
	var out []long
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "build" || n == "testdata" || n == "third_party") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > maxLines {
				out = append(out, long{filepath.ToSlash(rel) + "." + funcName(fn), n})
			}
		}
		return nil
	})
	return out, err
}

// funcName is fn's name with its receiver: "(*run).quantize", "Config.Validate", "Load".
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	name := fmt.Sprint(t)
	if star != "" {
		return "(*" + name + ")." + fn.Name.Name
	}
	return name + "." + fn.Name.Name
}

// readAllow reads allow.txt: one function name a line, as longFuncs names it; # starts a comment.
func readAllow(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	allow := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		if allow[line] {
			return nil, fmt.Errorf("%s: %s listed twice", path, line)
		}
		allow[line] = true
	}
	return allow, sc.Err()
}

func TestFunctionSize(t *testing.T) {
	found, err := longFuncs("../..")
	if err != nil {
		t.Fatal(err)
	}
	allow, err := readAllow("allow.txt")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range found {
		seen[f.name] = true
		if !allow[f.name] {
			t.Errorf("%s is %d lines, over %d: split it into named steps (allow.txt only shrinks)", f.name, f.lines, maxLines)
		}
	}
	var stale []string
	for name := range allow {
		if !seen[name] {
			stale = append(stale, name)
		}
	}
	slices.Sort(stale)
	for _, name := range stale {
		t.Errorf("allow.txt lists %s, which is now at most %d lines or gone: remove the line", name, maxLines)
	}
}

// The check sees what it must: a long function and a method with its receiver, and nothing
// under build/.
func TestLongFuncsFindsThem(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("\tx++\n", maxLines)
	src := "package p\n\ntype T[E any] struct{}\n\nfunc Short() {}\n\nfunc Long() {\n\tx := 0\n" + body + "\t_ = x\n}\n\n" +
		"func (t *T[E]) Method() {\n\tx := 0\n" + body + "\t_ = x\n}\n"
	for _, p := range []string{"a/p.go", "build/p.go"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := longFuncs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []long{{"a.Long", maxLines + 4}, {"a.(*T).Method", maxLines + 4}}
	if !slices.Equal(got, want) {
		t.Errorf("longFuncs = %v, want %v", got, want)
	}
}
