package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/torchspeed/torchspeed/internal/memlimit"
)

var zipMagic = []byte("PK\x03\x04")

// Load reads a TorchScript archive saved by torch.jit.save (traced or scripted) or by Save. It
// holds the engine lock (see LoadWithEngine) while libtorch reads the file.
func Load(path string) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	engineMu.Lock()
	defer engineMu.Unlock()
	return loadLocked(path)
}

func loadLocked(path string) (*Module, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("load model %q: file not found: check the path", path)
	case err != nil:
		return nil, fmt.Errorf("load model %q: %w", path, err)
	case st.IsDir():
		return nil, fmt.Errorf("load model %q: is a directory, not a TorchScript file", path)
	case st.Size() == 0:
		return nil, fmt.Errorf("load model %q: file is empty (0 bytes): export the model with torch.jit.save", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load model %q: %w", path, err)
	}
	head := make([]byte, 4)
	_, _ = io.ReadFull(f, head)
	if !bytes.Equal(head, zipMagic) {
		f.Close()
		return nil, fmt.Errorf("load model %q: not a TorchScript archive (zip header missing): export the model with torch.jit.save (torch.save'd state_dicts and ONNX files are not TorchScript)", path)
	}
	err = checkArchive(f, st.Size(), path)
	f.Close()
	if err != nil {
		return nil, err
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var out *C.ts_module
	if err := statusErr(C.ts_module_load(cs, &out)); err != nil {
		return nil, explainLoadError(path, err)
	}
	return wrapModule(out, path), nil
}

// LoadWithEngine selects the quantized engine (when engine is not "") and loads path, holding
// the engine lock across both: an INT8 model's weights are packed while it loads, for the
// engine set at that moment, so another goroutine must not switch it in between.
func LoadWithEngine(path, engine string) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	engineMu.Lock()
	defer engineMu.Unlock()
	if engine != "" {
		if err := setQEngineLocked(engine); err != nil {
			return nil, fmt.Errorf("load model %q: made for quantized engine %s: %w", path, Clip(engine), err)
		}
	}
	return loadLocked(path)
}

// LoadBytes reads a TorchScript archive from memory. name labels it in messages.
func LoadBytes(b []byte, name string) (*Module, error) {
	if err := checkShim(); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("load model %q: buffer is empty: export the model with torch.jit.save", name)
	}
	if !bytes.HasPrefix(b, zipMagic) {
		return nil, fmt.Errorf("load model %q: not a TorchScript archive (zip header missing): export the model with torch.jit.save", name)
	}
	if err := checkArchive(bytes.NewReader(b), int64(len(b)), name); err != nil {
		return nil, err
	}
	var out *C.ts_module
	err := statusErr(C.ts_module_load_bytes(unsafe.Pointer(&b[0]), C.size_t(len(b)), &out))
	runtime.KeepAlive(b)
	if err != nil {
		return nil, explainLoadError(name, err)
	}
	return wrapModule(out, name), nil
}

func explainLoadError(name string, err error) error {
	if errors.Is(err, Corrupt) {
		return fmt.Errorf("load model %q: truncated or corrupt archive: copy or export it again (%w)", name, err)
	}
	if m := unknownOp.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("load model %q: it calls the custom operator %s, which no loaded library registers: load the shared library that does first (torchspeed: --op-library LIB.so, or model.op_libraries in a config): %w", name, m[1], err)
	}
	return fmt.Errorf("load model %q: %w", name, err)
}

// unknownOp matches TorchScript's compile error for an operator nobody registered.
var unknownOp = regexp.MustCompile(`Unknown builtin op: ([A-Za-z0-9_]+::[A-Za-z0-9_]+)`)

// MaxFileFormatVersion is the newest TorchScript file format version (an archive's version
// record) this libtorch reads.
func MaxFileFormatVersion() int64 { return int64(C.ts_max_file_format_version()) }

func loadErr(name string, code Code, format string, args ...any) error {
	return &Error{Op: fmt.Sprintf("load model %q", name), Code: code, Msg: fmt.Sprintf(format, args...)}
}

// checkArchive reads an archive's zip directory and version record before libtorch sees it, so
// that the common failures get messages that say what to do: libtorch reports a newer format
// and a foreign zip alike as a missing record.
func checkArchive(r io.ReaderAt, size int64, name string) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return loadErr(name, Corrupt, "truncated or corrupt archive (%v): copy or export it again", err)
	}
	if err := CheckRecords(zr.File, name); err != nil {
		return err
	}
	var version *zip.File
	hasData, hasCode := false, false
	for _, f := range zr.File {
		_, rec, ok := strings.Cut(f.Name, "/")
		if !ok {
			continue
		}
		switch {
		case rec == "version" || rec == ".data/version":
			if version == nil || rec == ".data/version" {
				version = f
			}
		case rec == "data.pkl":
			hasData = true
		case strings.HasPrefix(rec, "code/"):
			hasCode = true
		}
	}
	if version == nil || !hasData || !hasCode {
		return loadErr(name, Corrupt, "a zip archive but not a TorchScript module (no version, data.pkl or code/ records): export it with torch.jit.script/trace + torch.jit.save")
	}
	if version.UncompressedSize64 > 64 {
		return loadErr(name, Corrupt, "its version record is %d bytes, not a version number: copy or export it again", version.UncompressedSize64)
	}
	rc, err := version.Open()
	if err != nil {
		return loadErr(name, Corrupt, "cannot read its version record: %v", err)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, 65))
	rc.Close()
	if err != nil {
		return loadErr(name, Corrupt, "cannot read its version record: %v: copy or export it again", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return loadErr(name, Corrupt, "its version record %q is not a number: copy or export it again", Clip(string(raw)))
	}
	if maxv := MaxFileFormatVersion(); v > maxv {
		return loadErr(name, Unsupported, "written by a newer PyTorch (file format version %d; this libtorch %s reads up to %d): save it with an older PyTorch or run torchspeed with a newer libtorch", v, Version(), maxv)
	}
	return nil
}

// MaxExtraBytes bounds an archive's extra files (its extra/NAME records) together: libtorch
// reads every one into memory when it loads the archive, and the module keeps them.
const MaxExtraBytes = 32 << 20

// CheckRecords checks what an archive's records declare before anything reads them: their
// number, each record's sizes (a zip bomb, or a size deflate cannot produce), the extra files
// against MaxExtraBytes, and all records together against the memory available. The error is
// an InvalidArgument *Error naming the archive and the sizes.
func CheckRecords(files []*zip.File, name string) error {
	total, err := memlimit.CheckRecords(files)
	if err != nil {
		return loadErr(name, InvalidArgument, "%v: export the model again with torch.jit.save", err)
	}
	var extra uint64
	for _, f := range files {
		if _, rec, ok := strings.Cut(f.Name, "/"); ok && strings.HasPrefix(rec, "extra/") {
			extra += min(f.UncompressedSize64, 1<<40) // at most 65536 records: no overflow
		}
	}
	if extra > MaxExtraBytes {
		return loadErr(name, InvalidArgument, "its extra files (extra/ records) declare %s together, more than the %s allowed: keep large data beside the model, not inside it", memlimit.FormatBytes(extra), memlimit.FormatBytes(uint64(MaxExtraBytes)))
	}
	if err := memlimit.CheckFits("its records", total, 1); err != nil {
		return loadErr(name, InvalidArgument, "%v: free memory, or load it on a larger machine", err)
	}
	return nil
}

// LoadLibrary loads a shared library of custom operators (one that registers them with
// TORCH_LIBRARY, as torch.ops.load_library does in Python), so that models calling them load.
// Call it before Load. path is a file, or a bare name the dynamic linker searches for.
// Loading one library twice is harmless; a library is never unloaded. torchspeed's own op
// library (OpsLibraryName) is skipped: libtorchspeed.so registers the same operators.
func LoadLibrary(path string) error {
	if err := checkShim(); err != nil {
		return err
	}
	if path == "" {
		return errors.New("load op library: the path is empty: name a .so file that registers the model's operators")
	}
	if isOwnOpsLibrary(path) {
		// libtorchspeed.so registers the same operators: loading them again would abort.
		return nil
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if err := statusErr(C.ts_load_library(cs)); err != nil {
		if errors.Is(err, NotFound) {
			return fmt.Errorf("load op library %q: file not found: check the path (build the library first, e.g. with torch.utils.cpp_extension): %w", path, err)
		}
		return fmt.Errorf("load op library %q: not loadable as a shared library (a wrong architecture, or a missing dependency or symbol; `ldd %s` lists what it needs): %w", path, path, err)
	}
	return nil
}
