package safefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "report.json")
	if err := WriteFile(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(p, func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fill error not returned: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("failed write changed the file: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
	if err := WriteFile(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != FileMode() {
		t.Errorf("mode %v, want %v", st.Mode().Perm(), FileMode())
	}
}

func TestCreateIgnoresPlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o600)
	p := filepath.Join(dir, "out.yaml")
	// The predictable name a naive writer would use.
	os.Symlink(victim, p+".tmp")
	if err := WriteFile(p, []byte("config")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("write followed a planted symlink: victim now %q", b)
	}
}

func TestCheckWritableDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritableDir(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o644)
	if err := CheckWritableDir(f); err == nil {
		t.Error("a file accepted as a folder")
	}
}

func TestSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	os.WriteFile(p, []byte("abc"), 0o644)
	sum, n, err := SHA256(p)
	if err != nil || n != 3 || sum != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("SHA256 = %s %d %v", sum, n, err)
	}
	if _, _, err := SHA256(p + "missing"); err == nil {
		t.Error("missing file accepted")
	}
}

func TestCheckInputFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "m.pt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pt")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{file: "", link: "", dir: "a folder", "/dev/zero": "a device",
		filepath.Join(dir, "none.pt"): "file not found"} {
		err := CheckInputFile(path)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if !Same(link, file) || !Same(file, filepath.Join(dir, ".", "m.pt")) || Same(file, dir) {
		t.Errorf("Same is wrong")
	}
}

func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFileLimit(file, 5); err != nil || string(b) != "12345" {
		t.Errorf("at the limit: %q, %v", b, err)
	}
	if _, err := ReadFileLimit(file, 4); err == nil || !strings.Contains(err.Error(), "5 bytes, more than the 4 bytes") {
		t.Errorf("over the limit: %v", err)
	}
	// A device that never ends stops at the limit.
	if _, err := ReadFileLimit("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "more than the 1 MiB") {
		t.Errorf("/dev/zero: %v", err)
	}
	if _, err := ReadFileLimit(dir, 1<<20); err == nil || !strings.Contains(err.Error(), "a folder") {
		t.Errorf("a folder: %v", err)
	}
}
