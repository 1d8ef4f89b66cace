package npy

import (
	"archive/zip"
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/memlimit"
	"github.com/torchspeed/torchspeed/internal/safefile"
)

// ReadNPZ reads every array in the .npz archive at path (as written by np.savez or
// np.savez_compressed: a zip of .npy members, stored or deflated). The map is keyed by
// member name without the ".npy" suffix, as numpy's NpzFile does; order lists the
// names in archive order.
func ReadNPZ(path string) (map[string]*Array, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return DecodeNPZ(f, st.Size(), path)
}

// DecodeNPZ is ReadNPZ for an archive of size bytes read through r; name labels it in
// messages.
func DecodeNPZ(r io.ReaderAt, size int64, name string) (map[string]*Array, []string, error) {
	path, archiveSize := name, size
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: not a .npz (zip) archive: %v", path, err)
	}
	if len(zr.File) > memlimit.MaxRecords {
		return nil, nil, exitcode.New(exitcode.Usage, fmt.Errorf("read %s: %d members, more than the %d a .npz may hold here: split the arrays into several files", path, len(zr.File), memlimit.MaxRecords))
	}
	arrays := make(map[string]*Array, len(zr.File))
	order := make([]string, 0, len(zr.File))
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue // directory entry
		}
		key, ok := strings.CutSuffix(f.Name, ".npy")
		if !ok {
			return nil, nil, fmt.Errorf("read %s: member %q is not a .npy array; an .npz must hold only arrays (np.savez)", path, f.Name)
		}
		if _, dup := arrays[key]; dup {
			return nil, nil, fmt.Errorf("read %s: member %q appears twice", path, f.Name)
		}
		a, err := readMember(f, path, archiveSize)
		if err != nil {
			return nil, nil, err
		}
		arrays[key] = a
		order = append(order, key)
	}
	if len(order) == 0 {
		return nil, nil, fmt.Errorf("read %s: archive holds no arrays", path)
	}
	return arrays, order, nil
}

func readMember(f *zip.File, path string, archiveSize int64) (*Array, error) {
	name := fmt.Sprintf("%s member %q", path, f.Name)
	if err := memlimit.CheckRecord(f); err != nil {
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("read %s: %v (np.savez writes one)", path, err))
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("read %s: %v", name, err)
	}
	defer rc.Close()
	// A member's declared size bounds what it inflates to (archive/zip stops there), and
	// CheckRecord bounds the declared size by the compressed bytes the archive holds: read checks
	// the .npy header against it and the memory available before allocating anything.
	size := int64(-1)
	if archiveSize >= 0 && f.CompressedSize64 <= uint64(archiveSize) && f.UncompressedSize64 <= math.MaxInt64 {
		size = int64(f.UncompressedSize64)
	}
	return read(bufio.NewReaderSize(rc, 1<<16), name, size)
}

// WriteNPZ writes arrays to path as an uncompressed .npz archive (like np.savez), member
// names[i]+".npy" holding arrays[i]. The file is written to a temporary name and renamed.
func WriteNPZ(path string, names []string, arrays []*Array) error {
	return writeNPZ(path, names, arrays, zip.Store)
}

// WriteNPZCompressed is WriteNPZ with deflate compression (like np.savez_compressed).
func WriteNPZCompressed(path string, names []string, arrays []*Array) error {
	return writeNPZ(path, names, arrays, zip.Deflate)
}

func writeNPZ(path string, names []string, arrays []*Array, method uint16) error {
	if err := checkNPZ(names, arrays); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return safefile.Write(path, func(w io.Writer) error { return encodeNPZ(w, names, arrays, method) })
}

// EncodeNPZ writes arrays to w as an uncompressed .npz archive (see WriteNPZ), for callers
// that write the file themselves (through internal/safefile).
func EncodeNPZ(w io.Writer, names []string, arrays []*Array) error {
	if err := checkNPZ(names, arrays); err != nil {
		return err
	}
	return encodeNPZ(w, names, arrays, zip.Store)
}

func checkNPZ(names []string, arrays []*Array) error {
	if len(names) != len(arrays) {
		return fmt.Errorf("%d names for %d arrays", len(names), len(arrays))
	}
	seen := map[string]bool{}
	for i, n := range names {
		if n == "" {
			return fmt.Errorf("array %d has an empty name", i)
		}
		if seen[n] {
			return fmt.Errorf("name %q used twice", n)
		}
		seen[n] = true
		if err := arrays[i].Validate(); err != nil {
			return fmt.Errorf("array %q: %w", n, err)
		}
	}
	return nil
}

func encodeNPZ(w io.Writer, names []string, arrays []*Array, method uint16) error {
	zw := zip.NewWriter(w)
	for i, n := range names {
		mw, err := zw.CreateHeader(&zip.FileHeader{Name: n + ".npy", Method: method})
		if err != nil {
			return err
		}
		if err := Write(mw, arrays[i]); err != nil {
			return err
		}
	}
	return zw.Close()
}
