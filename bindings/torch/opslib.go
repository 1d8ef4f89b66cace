package torch

/*
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include "torchspeed.h"

// The file libtorchspeed.so was loaded from (NULL if the loader cannot say).
static const char* ts_shim_file(void) {
	Dl_info info;
	if (dladdr((void*)&ts_api_version, &info) == 0) return NULL;
	return info.dli_fname;
}
*/
import "C"

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// OpsLibraryName is the file name (and soname) of torchspeed's op library: its operators
// (torchspeed::quantize_per_tensor, dequantize, add, add_relu, linear_packed, conv2d_gemm,
// conv2d_add, transformer_encoder_layer) registered with TORCH_LIBRARY and nothing else, for
// stock libtorch processes that run graphs calling them. CMake builds and installs it beside
// libtorchspeed.so.
const OpsLibraryName = "libtorchspeed_ops.so"

// OpsLibraryPath is the op library beside the libtorchspeed.so this process loaded (the build
// folder, or PREFIX/lib after make install).
func OpsLibraryPath() (string, error) {
	if err := checkShim(); err != nil {
		return "", err
	}
	shim := C.ts_shim_file()
	if shim == nil {
		return "", fmt.Errorf("%s: the dynamic loader does not say where libtorchspeed.so was loaded from", OpsLibraryName)
	}
	p := filepath.Join(filepath.Dir(C.GoString(shim)), OpsLibraryName)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not beside libtorchspeed.so (%v): build it with `make shim`, or install both with `make install`", OpsLibraryName, err)
	}
	return p, nil
}

// isOwnOpsLibrary reports whether path is torchspeed's op library (by its soname, whatever the
// file is called): its operators are already registered by libtorchspeed.so, and registering
// them twice stops the process.
func isOwnOpsLibrary(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	return err == nil && len(names) == 1 && names[0] == OpsLibraryName
}
