package memlimit

import (
	"archive/zip"
	"fmt"
	"math"
)

// Zip archives come from files anyone can write (TorchScript models, .npz arrays), and their
// readers allocate what a record's header declares, or grow until its data ends: what a record
// may inflate to is checked here, from the zip directory, before anything is read.

// maxDeflateRatio is about the most deflate can expand data (258 bytes from two or three bits):
// a record that declares more over its compressed bytes cannot be a real deflate stream.
const maxDeflateRatio = 1032

const (
	// BombRatio and BombFloor: a deflated record that inflates past BombFloor bytes at more than
	// BombRatio times its compressed size is refused as a zip bomb. Real weights and arrays
	// compress a few times at most; runs of zeros, a thousand times. Stored records are what they
	// are on disk and are bounded by the memory available only.
	BombRatio = 100
	BombFloor = 64 << 20
	// MaxRecords bounds the records of one archive (numpy and torch.jit.save write one per
	// array or tensor).
	MaxRecords = 1 << 16
)

// CheckRecord refuses a record whose declared sizes no reader should act on: a stored record
// whose two sizes differ, a deflated one that declares more than deflate can produce from its
// compressed bytes, or one that inflates like a zip bomb. The readers (Go's archive/zip, and
// miniz in libtorch) stop at the declared size, so this also bounds what the record's data
// actually inflates to.
func CheckRecord(f *zip.File) error {
	u, c := f.UncompressedSize64, f.CompressedSize64
	switch f.Method {
	case zip.Store:
		if u != c {
			return fmt.Errorf("record %s is stored uncompressed yet declares %d bytes in the archive and %d out of it: the file is corrupt", clip(f.Name), c, u)
		}
	case zip.Deflate:
		if c > math.MaxUint64/maxDeflateRatio || u > c*maxDeflateRatio+1024 {
			return fmt.Errorf("record %s declares %d bytes from %d compressed ones, more than deflate can produce: the file is corrupt", clip(f.Name), u, c)
		}
		if u > BombFloor && u > c*BombRatio {
			return fmt.Errorf("record %s inflates %d compressed bytes to %s (%d:1), past the %d:1 allowed beyond %s: a zip bomb, or data stored in a way that compresses like one: store it uncompressed",
				clip(f.Name), c, FormatBytes(u), u/max(c, 1), BombRatio, FormatBytes(uint64(BombFloor)))
		}
	}
	return nil
}

// CheckRecords checks the number of records and every record (CheckRecord), and returns the sum
// of their declared sizes, saturating at MaxUint64.
func CheckRecords(files []*zip.File) (uint64, error) {
	if len(files) > MaxRecords {
		return 0, fmt.Errorf("%d records, more than the %d allowed", len(files), MaxRecords)
	}
	var total uint64
	for _, f := range files {
		if err := CheckRecord(f); err != nil {
			return 0, err
		}
		if total > math.MaxUint64-f.UncompressedSize64 {
			total = math.MaxUint64
		} else {
			total += f.UncompressedSize64
		}
	}
	return total, nil
}

// CheckFits refuses need bytes that, held copies times, exceed the memory available (Available).
// what names the data in the message.
func CheckFits(what string, need uint64, copies int) error {
	avail, source := Available()
	if avail <= 0 {
		return nil
	}
	if need > uint64(avail)/uint64(max(copies, 1)) {
		held := ""
		if copies > 1 {
			held = fmt.Sprintf(" (x%d while it is read)", copies)
		}
		return fmt.Errorf("%s needs %s%s, %s is available (%s)", what, FormatBytes(need), held, FormatBytes(uint64(avail)), source)
	}
	return nil
}

// FormatBytes writes a byte count in binary units, e.g. "1.5 GiB".
func FormatBytes[T int64 | uint64](n T) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 6 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[i-1])
}

func clip(s string) string {
	const n = 200
	if len(s) > n {
		return fmt.Sprintf("%q...", s[:n])
	}
	return fmt.Sprintf("%q", s)
}
