package cpu

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// libc finds the C library in proc/self/maps and reads glibc's version from it.
func (r *reader) libc() Libc {
	s, err := r.read("proc/self/maps")
	if err != nil {
		return Libc{} // libraries already noted the missing maps
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		path := strings.Join(f[5:], " ")
		base := filepath.Base(path)
		if base != "libc.so.6" && !(strings.HasPrefix(base, "libc-2.") && strings.HasSuffix(base, ".so")) {
			continue
		}
		v, err := GlibcVersion(r.path(path))
		if err != nil {
			r.note("C library %s: %v", path, err)
			return Libc{Path: path}
		}
		return Libc{Name: "glibc", Version: v, Path: path}
	}
	r.note("no glibc in proc/self/maps; the C library is unknown")
	return Libc{}
}

// GlibcVersion returns the version of the glibc at path ("2.36"): the highest GLIBC_2.x
// version its ELF file defines (each release defines the symbol version of its own number
// when it adds a symbol, and 2.34 onwards every release does). An ELF file without GLIBC_
// version definitions is not glibc (musl defines none).
func GlibcVersion(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	defs, err := f.DynamicVersions()
	if err != nil {
		return "", fmt.Errorf("no version definitions (not glibc): %w", err)
	}
	best, bestMinor := "", -1
	for _, d := range defs {
		v, ok := strings.CutPrefix(d.Name, "GLIBC_2.")
		if !ok {
			continue
		}
		minorText, _, _ := strings.Cut(v, ".")
		minor, err := strconv.Atoi(minorText)
		if err != nil {
			continue
		}
		if minor > bestMinor {
			best, bestMinor = "2."+v, minor
		}
	}
	if best == "" {
		return "", fmt.Errorf("no GLIBC_2.x version definitions: not glibc")
	}
	return best, nil
}
