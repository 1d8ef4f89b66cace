package torchspeed

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// refusedAs loads p and wants a bad-input error (exit 2) that names the file and says each of want.
func refusedAs(t *testing.T, p string, want ...string) {
	t.Helper()
	m, err := Load(p, LoadOptions{KeepThreads: true})
	if err == nil {
		m.Close()
		t.Fatal("loaded")
	}
	if code := exitcode.Of(err); code != exitcode.Usage {
		t.Errorf("exit code %d, want %d: %v", code, exitcode.Usage, err)
	}
	for _, w := range append(want, p) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// The digests cover everything torchspeed reads back: each part of an artifact changed (every
// CRC recomputed, so only a digest can tell) is refused with exit 2, naming what changed.
func TestHostileDigestCoversEveryRecord(t *testing.T) {
	art := saveWithManifest(t, goodManifest())
	man, err := VerifyArchive(art)
	if err != nil {
		t.Fatal(err)
	}
	if len(man.ManifestSHA256) != 64 || len(man.RecordSHA256) < 4 {
		t.Fatalf("manifest digest %q, %d record digests", man.ManifestSHA256, len(man.RecordSHA256))
	}
	m, err := Load(art, LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings: %v", m.Warnings)
	}
	m.Close()
	largest, _, _ := fixtures.LargestRecord(t, art)
	_, largest, _ = strings.Cut(largest, "/")
	edit := func(match func(rec string) bool, change func([]byte) []byte) string {
		return fixtures.RewriteZip(t, art, func(name string, data []byte) []byte {
			if _, rec, _ := strings.Cut(name, "/"); match(rec) {
				return change(data)
			}
			return data
		})
	}
	is := func(want string) func(string) bool { return func(rec string) bool { return rec == want } }
	prefix := func(p string) func(string) bool { return func(rec string) bool { return strings.HasPrefix(rec, p) } }
	appendByte := func(b []byte) []byte { return append(b, ' ') }
	cases := []struct {
		name string
		path string
		want []string
	}{
		{"a manifest value", edit(is("extra/"+ManifestFile), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"precision": "fp32"`), []byte(`"precision": "fp33"`), 1)
		}), []string{"manifest (extra/torchspeed.json) does not match its digest"}},
		{"the manifest's format", edit(is("extra/"+ManifestFile), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"format": 2`), []byte(`"format": 1`), 1)
		}), []string{"does not match its digest"}},
		{"the manifest's own digest renamed", edit(is("extra/"+ManifestFile), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"manifest_sha256"`), []byte(`"manifest_sha257"`), 1)
		}), []string{"not its own (manifest_sha256)"}},
		{"a second manifest_sha256", edit(is("extra/"+ManifestFile), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`{`), []byte(`{"manifest_sha256": "`+strings.Repeat("0", 64)+`",`), 1)
		}), []string{"holds \"manifest_sha256\": 2 times"}},
		{"a record's digest in the manifest", edit(is("extra/"+ManifestFile), func(b []byte) []byte {
			at := bytes.Index(b, []byte(`"constants.pkl": "`)) + len(`"constants.pkl": "`)
			b[at] = "01"[(b[at]-'0'+1)%2] // another hex digit
			return b
		}), []string{"does not match its digest"}},
		{"the code", edit(prefix("code/"), appendByte), []string{"changed code/"}},
		{"the constants", edit(is("constants.pkl"), appendByte), []string{"changed constants.pkl"}},
		{"the data", edit(is("data.pkl"), appendByte), []string{"changed data.pkl"}},
		{"a tensor", edit(is(largest), func(b []byte) []byte { b[0] ^= 1; return b }), []string{"changed " + largest}},
		{"an extra record added", fixtures.AddZeros(t, art, "a.torchspeed.pt", "a/extra/notes.txt", []byte("x"), 8), []string{"added extra/notes.txt"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refusedAs(t, c.path, c.want...) })
	}
}

// Every single byte of the manifest changed (CRC recomputed) is refused as bad input.
func TestHostileDigestEveryManifestByte(t *testing.T) {
	art := saveWithManifest(t, goodManifest())
	var raw []byte
	fixtures.RewriteZip(t, art, func(name string, data []byte) []byte {
		if strings.HasSuffix(name, "/extra/"+ManifestFile) {
			raw = bytes.Clone(data)
		}
		return data
	})
	if len(raw) == 0 {
		t.Fatal("no manifest")
	}
	for i := range raw {
		for _, flip := range []byte{0x01, 0x20} {
			p := fixtures.RewriteZip(t, art, func(name string, data []byte) []byte {
				if strings.HasSuffix(name, "/extra/"+ManifestFile) {
					data[i] ^= flip
				}
				return data
			})
			_, err := VerifyArchive(p)
			var ec *exitcode.Error
			if err == nil || !errors.As(err, &ec) || ec.Code != exitcode.Usage {
				t.Fatalf("byte %d (%q) ^ %#x: %v", i, raw[i], flip, err)
			}
		}
	}
}
