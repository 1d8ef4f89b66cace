package cpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// reader reads files under a root and remembers what it could not read.
type reader struct {
	root  string
	notes []string
}

func (r *reader) path(rel string) string { return filepath.Join(r.root, rel) }

func (r *reader) read(rel string) (string, error) {
	b, err := os.ReadFile(r.path(rel))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (r *reader) readInt(rel string) (int64, error) {
	s, err := r.read(rel)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", r.path(rel), s)
	}
	return n, nil
}

func (r *reader) cpuList(rel string) (CPUSet, error) {
	s, err := r.read(rel)
	if err != nil {
		return nil, err
	}
	set, err := ParseCPUList(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path(rel), err)
	}
	return set, nil
}

func (r *reader) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// selected returns the bracketed choice of a sysfs mode file: "always [madvise] never".
func (r *reader) selected(rel string) string {
	s, err := r.read(rel)
	if err != nil {
		return ""
	}
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return s
}

// exists reports whether a file exists under the root.
func (r *reader) exists(rel string) bool {
	_, err := os.Stat(r.path(rel))
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
