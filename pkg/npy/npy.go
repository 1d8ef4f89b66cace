package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"unsafe"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/memlimit"
	"github.com/torchspeed/torchspeed/internal/safefile"
)

const magic = "\x93NUMPY"

// maxHeaderLen bounds the header we are willing to read; numpy's own reader refuses
// headers over 10000 bytes by default, so anything near this is corrupt.
const maxHeaderLen = 1 << 20

// trustedAlloc is the payload size up to which we allocate from the header alone, when
// the stream length is unknown. Larger payloads are read incrementally so a corrupt
// header cannot make us allocate memory the data does not back.
const trustedAlloc = 1 << 20

var nativeBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// ReadFile reads the .npy file at path.
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	return read(bufio.NewReaderSize(f, 1<<16), path, size)
}

// Read reads one .npy array from r. Errors name the input "npy stream"; use ReadFile
// where there is a file name to report.
func Read(r io.Reader) (*Array, error) {
	size := int64(-1)
	if br, ok := r.(*bytes.Reader); ok {
		size = int64(br.Len())
	}
	return read(r, "npy stream", size)
}

// read parses a .npy stream. size is the number of bytes r holds, or -1 if unknown;
// when known, a truncated payload is reported before anything is allocated.
func read(r io.Reader, name string, size int64) (*Array, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("read %s: %s", name, fmt.Sprintf(format, args...))
	}
	var pre [10]byte
	n, err := io.ReadFull(r, pre[:8])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fail("%v", err)
	}
	if n < len(magic) || string(pre[:len(magic)]) != magic {
		return nil, fail("bad magic (not a .npy file)")
	}
	if n < 8 {
		return nil, fail("truncated header (file ends after %d bytes)", n)
	}
	major, minor := pre[6], pre[7]
	var hlen, prefix int
	switch major {
	case 1:
		if _, err := io.ReadFull(r, pre[8:10]); err != nil {
			return nil, fail("truncated header (file ends inside the header length)")
		}
		hlen, prefix = int(binary.LittleEndian.Uint16(pre[8:10])), 10
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return nil, fail("truncated header (file ends inside the header length)")
		}
		v := binary.LittleEndian.Uint32(l[:])
		if v > maxHeaderLen {
			return nil, fail("header length %d is implausibly large (corrupt file?)", v)
		}
		hlen, prefix = int(v), 12
	default:
		return nil, fail("unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor)
	}
	if minor != 0 {
		return nil, fail("unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor)
	}
	if size >= 0 && int64(prefix+hlen) > size {
		return nil, fail("truncated header (header length %d, file has %d bytes)", hlen, size)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fail("truncated header (header length %d): %v", hlen, err)
	}
	h, err := parseHeader(string(hb))
	if err != nil {
		return nil, fail("wrong header: %v", err)
	}
	if h.fortranOrder {
		return nil, fail("fortran_order=True arrays are not supported; save np.ascontiguousarray(arr) instead")
	}
	dtype, big, err := parseDescr(h.descr)
	if err != nil {
		return nil, fail("%v", err)
	}
	count := numel(h.shape)
	isz := int64(itemSize(dtype))
	if count < 0 || count > (1<<62)/isz {
		return nil, fail("shape %s is too large", ShapeString(h.shape))
	}
	need := count * isz
	avail := int64(-1)
	if size >= 0 {
		avail = size - int64(prefix+hlen)
	}
	truncated := func(got int64) error {
		return fail("header says %s %s = %d bytes, file has %d", ShapeString(h.shape), dtype, need, got)
	}
	if avail >= 0 && avail < need {
		return nil, truncated(avail)
	}
	if need > trustedAlloc {
		if err := memlimit.CheckFits(fmt.Sprintf("its array (%s %s)", ShapeString(h.shape), dtype), uint64(need), 1); err != nil {
			return nil, exitcode.New(exitcode.Usage, fail("%v: use a smaller array, or free memory", err))
		}
	}
	data, got, err := readPayload(r, dtype, count, need, avail >= need || need <= trustedAlloc)
	if err != nil {
		if got < need {
			return nil, truncated(got)
		}
		return nil, fail("%v", err)
	}
	if big != nativeBigEndian {
		swapBytes(data)
	}
	return &Array{Shape: h.shape, DType: dtype, Data: data}, nil
}

// readPayload reads need bytes (count elements of dtype) into a new slice. When
// preallocate is false it grows a buffer as data arrives instead of trusting need.
// On a short read it returns the number of bytes that were there.
func readPayload(r io.Reader, dtype string, count, need int64, preallocate bool) (any, int64, error) {
	if !preallocate {
		var buf bytes.Buffer
		got, err := io.CopyN(&buf, r, need)
		if err != nil {
			return nil, got, err
		}
		data := makeSlice(dtype, count)
		copy(byteView(data), buf.Bytes())
		return fixBool(data), got, nil
	}
	data := makeSlice(dtype, count)
	n, err := io.ReadFull(r, byteView(data))
	if err != nil {
		return nil, int64(n), err
	}
	return fixBool(data), int64(n), nil
}

// MakeData allocates n zero elements of dtype as the Go slice an Array holds ([]float32 for
// "float32", ...), or returns nil for a dtype this package does not know.
func MakeData(dtype string, n int) any {
	switch dtype {
	case Float32:
		return make([]float32, n)
	case Float64:
		return make([]float64, n)
	case Int64:
		return make([]int64, n)
	case Int32:
		return make([]int32, n)
	case Int16:
		return make([]int16, n)
	case Int8:
		return make([]int8, n)
	case Uint8:
		return make([]uint8, n)
	case Bool:
		return make([]bool, n)
	}
	return nil
}

// makeSlice allocates count elements of dtype for reading. Bool payloads are read as bytes
// first (see fixBool) because a Go bool must hold exactly 0 or 1.
func makeSlice(dtype string, count int64) any {
	if dtype == Bool {
		return boolBytes(make([]uint8, count))
	}
	if d := MakeData(dtype, int(count)); d != nil {
		return d
	}
	panic("npy: makeSlice: unknown dtype " + dtype) // unreachable: dtypes come from parseDescr
}

// boolBytes marks a byte slice that holds a bool payload still to be normalized.
type boolBytes []uint8

func fixBool(data any) any {
	b, ok := data.(boolBytes)
	if !ok {
		return data
	}
	out := make([]bool, len(b))
	for i, v := range b {
		out[i] = v != 0
	}
	return out
}

// byteView returns the memory of a numeric slice as bytes (no copy).
func byteView(data any) []byte {
	switch d := data.(type) {
	case []float32:
		return asBytes(d)
	case []float64:
		return asBytes(d)
	case []int64:
		return asBytes(d)
	case []int32:
		return asBytes(d)
	case []int16:
		return asBytes(d)
	case []int8:
		return asBytes(d)
	case []uint8:
		return d
	case boolBytes:
		return d
	}
	return nil
}

func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// swapBytes reverses the byte order of every element in place.
func swapBytes(data any) {
	switch d := data.(type) {
	case []float32:
		u := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(d))), len(d))
		for i, v := range u {
			u[i] = bits.ReverseBytes32(v)
		}
	case []int32:
		for i, v := range d {
			d[i] = int32(bits.ReverseBytes32(uint32(v)))
		}
	case []float64:
		u := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(d))), len(d))
		for i, v := range u {
			u[i] = bits.ReverseBytes64(v)
		}
	case []int64:
		for i, v := range d {
			d[i] = int64(bits.ReverseBytes64(uint64(v)))
		}
	case []int16:
		for i, v := range d {
			d[i] = int16(bits.ReverseBytes16(uint16(v)))
		}
	}
}

// Write writes a as a .npy stream (format 1.0, or 2.0 if the header needs it),
// little-endian, C order.
func Write(w io.Writer, a *Array) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("write npy: %w", err)
	}
	h := formatHeader(a)
	// Pad with spaces and a final newline so the data starts on a 64-byte boundary, as
	// numpy does (it lets readers memory-map the payload aligned).
	var prefix []byte
	version := byte(1)
	total := len(magic) + 4 + len(h) + 1
	if total+63 > 1<<16 {
		version = 2
		total = len(magic) + 6 + len(h) + 1
	}
	pad := (64 - total%64) % 64
	hdr := h + string(bytes.Repeat([]byte{' '}, pad)) + "\n"
	prefix = append(prefix, magic...)
	prefix = append(prefix, version, 0)
	if version == 1 {
		prefix = binary.LittleEndian.AppendUint16(prefix, uint16(len(hdr)))
	} else {
		prefix = binary.LittleEndian.AppendUint32(prefix, uint32(len(hdr)))
	}
	prefix = append(prefix, hdr...)
	if _, err := w.Write(prefix); err != nil {
		return fmt.Errorf("write npy: %w", err)
	}
	payload := payloadLE(a.Data)
	if _, err := w.Write(payload); err != nil {
		return fmt.Errorf("write npy: %w", err)
	}
	return nil
}

// payloadLE returns the little-endian bytes of data, sharing memory where the host is
// little-endian.
func payloadLE(data any) []byte {
	if b, ok := data.([]bool); ok {
		out := make([]byte, len(b))
		for i, v := range b {
			if v {
				out[i] = 1
			}
		}
		return out
	}
	if !nativeBigEndian {
		return byteView(data)
	}
	// Big-endian host: swap a copy so the caller's array is left alone.
	cp := makeSlice(dtypeOf(data), int64(sliceLen(data)))
	copy(byteView(cp), byteView(data))
	swapBytes(cp)
	return byteView(cp)
}

func dtypeOf(data any) string {
	a := &Array{Data: data}
	for _, dt := range []string{Float32, Float64, Int64, Int32, Int16, Int8, Uint8, Bool} {
		a.DType = dt
		if _, ok := a.dataLen(); ok {
			return dt
		}
	}
	return ""
}

func sliceLen(data any) int {
	n, _ := (&Array{Data: data, DType: dtypeOf(data)}).dataLen()
	return n
}

// WriteFile writes a to path atomically: it writes a temporary file in the same
// directory and renames it over path, so readers never see a partial file.
func WriteFile(path string, a *Array) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return safefile.Write(path, func(w io.Writer) error { return Write(w, a) })
}
