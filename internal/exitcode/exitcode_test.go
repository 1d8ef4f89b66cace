package exitcode

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/tserr"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, OK},
		{errors.New("x"), Failure},
		{Usagef("bad %s", "flag"), Usage},
		{fmt.Errorf("wrapped: %w", New(Validation, errors.New("thresholds"))), Validation},
		{fmt.Errorf("run: %w", context.Canceled), Interrupt},
		{fmt.Errorf("run: %w", context.DeadlineExceeded), Failure},
		// The library's classes (pkg/tserr) map to the documented codes...
		{fmt.Errorf("optimize: %w", tserr.BadInputf("model.name %q", "a/b")), Usage},
		{fmt.Errorf("optimize: %w", tserr.ErrAccuracy), Validation},
		{fmt.Errorf("optimize interrupted: %w", tserr.ErrInterrupted), Interrupt},
		// ...and the command's own choice, outside them, wins.
		{New(Failure, tserr.BadInputf("x")), Failure},
		{New(Usage, fmt.Errorf("a: %w", context.Canceled)), Usage},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if New(Usage, nil) != nil {
		t.Error("New(code, nil) is not nil")
	}
}

// Library packages report a failure class (pkg/tserr); only the command picks exit codes, so
// nothing under pkg/ imports this package, tests included.
func TestNoLibraryImports(t *testing.T) {
	const self = "github.com/torchspeed/torchspeed/internal/exitcode"
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir("../../pkg", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		n++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == self {
				t.Errorf("%s imports %s: return an error of a pkg/tserr class instead", path, self)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("read %d Go files under pkg/, want the whole library", n)
	}
}
