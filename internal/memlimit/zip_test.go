package memlimit

import (
	"archive/zip"
	"strings"
	"testing"
)

func TestCheckRecord(t *testing.T) {
	rec := func(method uint16, comp, uncomp uint64) *zip.File {
		return &zip.File{FileHeader: zip.FileHeader{Name: "m/data/0", Method: method, CompressedSize64: comp, UncompressedSize64: uncomp}}
	}
	for _, c := range []struct {
		name string
		f    *zip.File
		want string // "" accepted
	}{
		{"stored", rec(zip.Store, 1<<30, 1<<30), ""},
		{"stored, sizes differ", rec(zip.Store, 10, 1<<30), "stored uncompressed yet declares 10 bytes"},
		{"deflated 3:1", rec(zip.Deflate, 100<<20, 300<<20), ""},
		{"deflated 1000:1 under the floor", rec(zip.Deflate, 64<<10, 64<<20), ""},
		{"deflated 1028:1 past the floor", rec(zip.Deflate, 1043638, 1<<30), "(1028:1), past the 100:1 allowed beyond 64.0 MiB: a zip bomb"},
		{"more than deflate makes", rec(zip.Deflate, 100, 1<<20), "more than deflate can produce"},
		{"a size past uint64 arithmetic", rec(zip.Deflate, 1<<62, 1<<63), "more than deflate can produce"},
	} {
		err := CheckRecord(c.f)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	many := make([]*zip.File, MaxRecords+1)
	for i := range many {
		many[i] = rec(zip.Store, 1, 1)
	}
	if _, err := CheckRecords(many); err == nil || !strings.Contains(err.Error(), "65537 records") {
		t.Errorf("65537 records: %v", err)
	}
	if total, err := CheckRecords(many[:3]); err != nil || total != 3 {
		t.Errorf("3 records: %d, %v", total, err)
	}
	if got := FormatBytes(int64(1536)); got != "1.5 KiB" {
		t.Errorf("FormatBytes(1536) = %q", got)
	}
}
