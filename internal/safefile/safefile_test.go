package safefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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
