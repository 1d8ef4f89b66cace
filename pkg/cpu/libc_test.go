package cpu

import (
	"os"
	"regexp"
	"runtime"
	"testing"
)

// The live probe names glibc and its version, read from the library's ELF version
// definitions; a file that is not glibc is an error, not a version.
func TestGlibcVersion(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("glibc is Linux's")
	}
	p, err := Detect(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Libc.Name == "" {
		// A test binary without cgo maps no libc; the Debian machines this runs on do have one.
		path := "/lib/x86_64-linux-gnu/libc.so.6"
		if _, err := os.Stat(path); err != nil {
			t.Skipf("no libc mapped and no %s", path)
		}
		v, err := GlibcVersion(path)
		if err != nil || !regexp.MustCompile(`^2\.[0-9]+$`).MatchString(v) {
			t.Fatalf("%s: version %q, %v", path, v, err)
		}
	} else if p.Libc.Name != "glibc" || !regexp.MustCompile(`^2\.[0-9]+$`).MatchString(p.Libc.Version) {
		t.Fatalf("libc %+v", p.Libc)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := GlibcVersion(exe); err == nil {
		t.Errorf("the test binary read as glibc %s", v)
	}
	if _, err := GlibcVersion("/nonexistent/libc.so.6"); err == nil {
		t.Error("a missing file: no error")
	}
}

// A fixture's maps name no C library: the probe says it is unknown instead of guessing.
func TestLibcUnknownFromFixture(t *testing.T) {
	p, err := Detect(Options{Root: "testdata/xeon-2s", Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Libc.Name != "" || p.Libc.Version != "" {
		t.Errorf("libc %+v from a fixture without one", p.Libc)
	}
}
