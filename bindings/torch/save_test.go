package torch_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/safefile"
)

// Save replaces an existing file whole, gives it the mode every file torchspeed writes gets,
// keeps the extra files, and leaves no temporary file behind; a save into a missing folder
// fails naming the path and writes nothing.
func TestSaveAtomic(t *testing.T) {
	m := loadFixture(t, fixtures.Load(t).Get(t, "digits"))
	dir := t.TempDir()
	path := filepath.Join(dir, "m.pt")
	if err := os.WriteFile(path, []byte("old contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := map[string][]byte{"b.json": []byte(`{"b":2}`), "a.json": []byte(`{"a":1}`)}
	if err := m.Save(path, extra); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != safefile.FileMode() {
		t.Errorf("saved mode %v, want %v", st.Mode().Perm(), safefile.FileMode())
	}
	back, err := torch.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	got, err := back.ExtraFiles()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		if !bytes.Equal(got[k], v) {
			t.Errorf("extra file %s = %q, want %q", k, got[k], v)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries after save, want only m.pt", len(ents))
	}

	missing := filepath.Join(dir, "no-such-folder", "m.pt")
	err = m.Save(missing, nil)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("save into a missing folder: err %v, want one naming %s", err, missing)
	}
	if _, serr := os.Stat(filepath.Dir(missing)); !os.IsNotExist(serr) {
		t.Errorf("save into a missing folder created it: %v", serr)
	}
}
