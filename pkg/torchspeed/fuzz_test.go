package torchspeed

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/version"
)

// fuzzSeed is a small archive laid out as torch.jit.save lays one out, with a manifest whose
// digests match its records (so that the fuzzer starts inside the digest checks), its records
// stored or deflated.
func fuzzSeed(t testing.TB, method uint16, edit func(man *Manifest)) []byte {
	recs := map[string][]byte{
		"data.pkl":          []byte("\x80\x02}q\x00."),
		"code/__torch__.py": []byte("class M(Module):\n  def forward(self, x):\n    return x\n"),
		"constants.pkl":     []byte("\x80\x02)."),
		"version":           []byte("3\n"),
		"extra/notes.txt":   []byte("kept"),
	}
	man := &Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: "1.13.1", Precision: "fp32",
		Inputs: []InputSpec{{Name: "x", Shape: []int64{1, 4}, DType: "float32"}}, RecordSHA256: map[string]string{}}
	for name, b := range recs {
		sum := sha256.Sum256(b)
		man.RecordSHA256[name] = hex.EncodeToString(sum[:])
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "m/" + name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	for _, name := range sortedKeys(recs) {
		add(name, recs[name])
	}
	if edit != nil {
		edit(man)
	}
	raw, err := marshalSigned(man)
	if err != nil {
		t.Fatal(err)
	}
	add("extra/"+ManifestFile, raw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzVerifyArchive checks that no file makes the artifact reader (zip records, their sizes and
// CRCs, the digests, the manifest and its schema) panic, hang or allocate without bound, that its
// messages stay short, and that a manifest it accepts passes the schema check.
//
//	go test ./pkg/torchspeed -run '^$' -fuzz FuzzVerifyArchive -fuzztime 60s
func FuzzVerifyArchive(f *testing.F) {
	f.Add(fuzzSeed(f, zip.Store, nil))
	f.Add(fuzzSeed(f, zip.Deflate, nil))
	f.Add(fuzzSeed(f, zip.Store, func(m *Manifest) { m.Runtime.Candidate = "passive\ntouch pwned\n#" }))
	f.Add(fuzzSeed(f, zip.Store, func(m *Manifest) { m.RecordSHA256 = nil }))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "a.torchspeed.pt")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		man, err := VerifyArchive(p)
		if err != nil {
			if len(err.Error()) > 8192 {
				t.Fatalf("a %d-byte message", len(err.Error()))
			}
			return
		}
		if man != nil {
			if err := checkManifest(man); err != nil {
				t.Fatalf("VerifyArchive accepted a manifest the schema refuses: %v", err)
			}
		}
	})
}

// The fuzzer's seeds reach the end of the checks: a signed archive verifies, stored or deflated,
// and a shell command in its manifest is refused by the schema.
func TestFuzzSeedsVerify(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct {
		data []byte
		want string
	}{
		{fuzzSeed(t, zip.Store, nil), ""},
		{fuzzSeed(t, zip.Deflate, nil), ""},
		{fuzzSeed(t, zip.Store, func(m *Manifest) { m.RecordSHA256 = nil }), ""},
		{fuzzSeed(t, zip.Store, func(m *Manifest) { m.Runtime.Candidate = "passive\ntouch pwned\n#" }), "runtime.candidate"},
		{fuzzSeed(t, zip.Store, func(m *Manifest) { m.RecordSHA256["data.pkl"] = strings.Repeat("0", 64) }), "changed data.pkl"},
	} {
		p := filepath.Join(dir, "a.pt")
		if err := os.WriteFile(p, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		man, err := VerifyArchive(p)
		if c.want == "" && (err != nil || man == nil || man.ManifestSHA256 == "") {
			t.Errorf("seed %d: %v", i, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("seed %d: %v, want %q", i, err, c.want)
		}
	}
}
