package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unsafe"
)

// ExtraFiles returns the extra files the archive carried (extra/NAME), by name.
func (m *Module) ExtraFiles() (map[string][]byte, error) {
	names, err := m.stringOp(func(c *C.ts_module, p **C.char) *C.ts_status { return C.ts_module_extra_names(c, p) })
	if err != nil {
		return nil, err
	}
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.g.release()
	out := map[string][]byte{}
	for _, name := range strings.Split(names, "\n") {
		if name == "" {
			continue
		}
		cs := C.CString(name)
		var p *C.char
		var n C.size_t
		err := statusErr(C.ts_module_extra_file(m.c, cs, &p, &n))
		C.free(unsafe.Pointer(cs))
		if err != nil {
			return nil, err
		}
		out[name] = C.GoBytes(unsafe.Pointer(p), C.int(n))
		C.ts_free(unsafe.Pointer(p))
	}
	return out, nil
}

// Save writes the module with extra files (name -> contents) atomically: to a temporary file
// in the same folder, then renamed over path. A failed save leaves nothing behind.
func (m *Module) Save(path string, extra map[string][]byte) error {
	if err := m.acquire(); err != nil {
		return err
	}
	defer m.g.release()
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save model %q: cannot write to folder %q: %w", path, dir, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmpName)
		}
	}()
	names := make([]string, 0, len(extra))
	for k := range extra {
		names = append(names, k)
	}
	sort.Strings(names)
	cnames := make([]*C.char, len(names))
	ccont := make([]*C.char, len(names))
	lens := make([]C.size_t, len(names))
	for i, k := range names {
		cnames[i] = C.CString(k)
		ccont[i] = (*C.char)(C.CBytes(extra[k]))
		lens[i] = C.size_t(len(extra[k]))
	}
	defer func() {
		for i := range names {
			C.free(unsafe.Pointer(cnames[i]))
			C.free(unsafe.Pointer(ccont[i]))
		}
	}()
	pin := runtime.Pinner{}
	defer pin.Unpin()
	var pn, pc **C.char
	var pl *C.size_t
	if len(names) > 0 {
		pin.Pin(&cnames[0])
		pin.Pin(&ccont[0])
		pin.Pin(&lens[0])
		pn, pc, pl = &cnames[0], &ccont[0], &lens[0]
	}
	cpath := C.CString(tmpName)
	defer C.free(unsafe.Pointer(cpath))
	if err := statusErr(C.ts_module_save(m.c, cpath, pn, pc, pl, C.size_t(len(names)))); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	if err := syncFile(tmpName); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	// CreateTemp makes 0600 files; an artifact is as readable as any file the user writes.
	if err := os.Chmod(tmpName, 0o644); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	ok = true
	return nil
}

// syncFile flushes a written file so that a rename never exposes a half-written artifact, and
// catches a full disk that the writer did not report.
func syncFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
