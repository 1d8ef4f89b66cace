// Package safefile writes files so that readers see the old file or the whole new one, never a
// part, and a failure leaves nothing behind: the bytes go to a temporary file created with
// O_EXCL in the target folder (never a predictable name a planted symlink could redirect), are
// synced, given the mode an ordinary file would get under the process umask, and renamed over
// the target. It also holds the one "is this folder writable" check and the one file digest.
package safefile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// WriteFile atomically replaces path with data.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write atomically replaces path with what fill writes. fill's error, or any I/O error, leaves
// path as it was and removes the temporary file.
func Write(path string, fill func(w io.Writer) error) (err error) {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Abort()
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<16)
	if err = fill(bw); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	return f.Commit()
}

// File is a temporary file that becomes path on Commit.
type File struct {
	*os.File
	path string
	done bool
}

// Create opens a new temporary file beside path (O_EXCL, mode 0600 until Commit).
func Create(path string) (*File, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write %q: %w: check that the folder exists and is writable", path, err)
	}
	return &File{File: f, path: path}, nil
}

// TempName is the temporary file's path (for writers that need a path, e.g. libtorch's save).
func (f *File) TempName() string { return f.File.Name() }

// Commit syncs the file, gives it the umask's ordinary-file mode and renames it to path.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("write %q: already committed or aborted", f.path)
	}
	f.done = true
	tmp := f.File.Name()
	fail := func(err error) error {
		f.File.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", f.path, err)
	}
	if err := f.File.Sync(); err != nil {
		return fail(err)
	}
	if err := f.File.Chmod(FileMode()); err != nil {
		return fail(err)
	}
	if err := f.File.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", f.path, err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", f.path, err)
	}
	return nil
}

// Abort removes the temporary file; path is untouched. It is safe after Commit (does nothing).
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.File.Name())
}

var (
	umaskOnce sync.Once
	umask     os.FileMode = 0o022
)

// FileMode is the mode os.Create would give a new file under this process's umask (0666 &^
// umask): every file torchspeed writes gets it, so artifacts, plots and reports agree.
func FileMode() os.FileMode {
	umaskOnce.Do(func() {
		// /proc/self/status reports the umask without changing it (syscall.Umask would, for a
		// moment, for every thread of the process).
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := strings.CutPrefix(string(line), "Umask:"); ok {
				if u, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					umask = os.FileMode(u) & 0o777
				}
			}
		}
	})
	return 0o666 &^ umask
}

// CheckWritableDir creates dir if needed and proves a file can be created in it, so that a long
// run does not fail only when it saves.
func CheckWritableDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("output folder %q is a file: choose a folder", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder %q cannot be created: %w: choose a writable folder", dir, err)
	}
	f, err := os.CreateTemp(dir, ".torchspeed-check-*")
	if err != nil {
		return fmt.Errorf("output folder %q is not writable: %w: choose a writable folder", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("output folder %q: remove probe file: %w", dir, err)
	}
	return nil
}

// SHA256 is the hex SHA-256 of a file's contents and its size.
func SHA256(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", 0, fmt.Errorf("%q: file not found: check the path", path)
		}
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %q: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// CheckInputFile checks that path names a file torchspeed can read whole: it exists and is a
// regular file (or a link to one). A folder, a device (/dev/zero) or a pipe given where a
// model, config or data file belongs is refused before anything reads it.
func CheckInputFile(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%q: file not found: check the path", path)
	case err != nil:
		return fmt.Errorf("%q: %w", path, err)
	case st.IsDir():
		return fmt.Errorf("%q is a folder, not a file: give the file's path", path)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%q is not a regular file (%s): give a file", path, kind(st.Mode()))
	}
	return nil
}

func kind(m os.FileMode) string {
	switch {
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

// Same reports whether two paths name one file: the same file through links or other
// spellings (os.SameFile) when both exist, else the same absolute path.
func Same(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}

// ReadFileLimit reads a file of at most limit bytes whole. A longer file, or one that never
// ends (/dev/zero, a pipe), is an error after limit+1 bytes: nothing is read into memory
// beyond that. The errors do not repeat the path: the caller names the file.
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, errors.New("a folder, not a file: give the file's path")
	} else if err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, fmt.Errorf("%d bytes, more than the %s such a file can be: check the path", st.Size(), formatSize(limit))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than the %s such a file can be (a device or a pipe that does not end?): check the path", formatSize(limit))
	}
	return b, nil
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Named is a path with what it is, for messages: {"--benchfmt", "out.txt"}.
type Named struct {
	What string
	Path string
}

// CheckNotInput refuses outputs that would replace one of the inputs: the same file under any
// spelling or link (Same). Empty paths are skipped.
func CheckNotInput(outputs, inputs []Named) error {
	for _, o := range outputs {
		for _, in := range inputs {
			if o.Path != "" && in.Path != "" && Same(o.Path, in.Path) {
				return fmt.Errorf("%s %q is also %s %q: writing it would destroy that input; choose another path", o.What, o.Path, in.What, in.Path)
			}
		}
	}
	return nil
}
