package torch

/*
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/torchspeed/torchspeed/internal/safefile"
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

// Save writes the module with extra files (name -> contents) atomically through
// internal/safefile: libtorch writes a temporary file in the same folder, which is synced,
// given the ordinary-file mode and renamed over path. A failed save leaves nothing behind.
func (m *Module) Save(path string, extra map[string][]byte) error {
	if err := m.acquire(); err != nil {
		return err
	}
	defer m.g.release()
	tmp, err := safefile.Create(path)
	if err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	defer tmp.Abort() // does nothing after Commit
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
	cpath := C.CString(tmp.TempName())
	defer C.free(unsafe.Pointer(cpath))
	if err := statusErr(C.ts_module_save(m.c, cpath, pn, pc, pl, C.size_t(len(names)))); err != nil {
		return fmt.Errorf("save model %q: %w", path, err)
	}
	// libtorch wrote the file by name, through its own descriptor: Commit syncs it through
	// tmp's (the same file), which also catches a full disk that the writer did not report.
	if err := tmp.Commit(); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	return nil
}
