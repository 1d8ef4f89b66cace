package bench

import (
	"archive/zip"
	"fmt"
	"math"
	"os"
	"strings"
)

// Memory is what a run held: the process's peak resident set (the models, libtorch, its
// allocator's caches and the Go runtime together) and each model's size, by name.
type Memory struct {
	// PeakRSSBytes is nil when it could not be read.
	PeakRSSBytes *int64               `json:"peak_rss_bytes"`
	Models       map[string]ModelSize `json:"models"`
}

// ModelSize is how big a TorchScript archive is on disk and how many bytes of tensors it
// stores: parameters, buffers and the constants a frozen graph holds its weights in, packed
// INT8 weights included (the records under data/ and constants/, uncompressed).
type ModelSize struct {
	FileBytes   int64 `json:"file_bytes"`
	TensorBytes int64 `json:"tensor_bytes"`
}

// MeasureModelSize reads the archive's directory (not its records) for ModelSize.
func MeasureModelSize(path string) (ModelSize, error) {
	st, err := os.Stat(path)
	if err != nil {
		return ModelSize{}, fmt.Errorf("model size of %q: %w", path, err)
	}
	zr, err := zip.OpenReader(path)
	if err != nil {
		return ModelSize{}, fmt.Errorf("model size of %q: not a TorchScript archive (%v): export it with torch.jit.save", path, err)
	}
	defer zr.Close()
	sz := ModelSize{FileBytes: st.Size()}
	for _, f := range zr.File {
		// Records live under one folder named for the archive: NAME/data/0, NAME/constants/3.
		_, rec, ok := strings.Cut(f.Name, "/")
		if !ok || strings.HasSuffix(f.Name, "/") {
			continue
		}
		if strings.HasPrefix(rec, "data/") || strings.HasPrefix(rec, "constants/") {
			if f.UncompressedSize64 > uint64(math.MaxInt64-sz.TensorBytes) {
				return ModelSize{}, fmt.Errorf("model size of %q: record %s claims %d bytes, more than any file holds: the archive is damaged; export it again", path, rec, f.UncompressedSize64)
			}
			sz.TensorBytes += int64(f.UncompressedSize64)
		}
	}
	return sz, nil
}

// line says it in one line for the table: "memory: peak RSS 412 MB; resnet18.pt 46.8 MB file,
// 46.7 MB tensors; ...".
func (m *Memory) line(rs []*Result) string {
	s := "memory: peak RSS "
	if m.PeakRSSBytes != nil {
		s += FormatBytes(*m.PeakRSSBytes)
	} else {
		s += "not measured"
	}
	for _, res := range rs {
		if sz, ok := m.Models[res.Name]; ok {
			s += fmt.Sprintf("; %s %s file, %s tensors", res.Name, FormatBytes(sz.FileBytes), FormatBytes(sz.TensorBytes))
		}
	}
	return s
}

// FormatBytes prints n in decimal megabytes (kilobytes below one), as file sizes are usually
// read.
func FormatBytes(n int64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
