// Package torch is torchspeed's only cgo package: Go types over the C ABI in csrc/torchspeed.h,
// which wraps libtorch. Every other package speaks the Go types here.
//
// The shim library is built by CMake into build/cmake (make shim). Programs built from this
// tree find it through an rpath into build/cmake, so `go build` and `go test` need no set-up.
// Programs built against an installed library (make install PREFIX=P) use the build tag
// torchspeed_pkgconfig: the header and library then come from pkg-config's torchspeed.pc
// (PKG_CONFIG_PATH=P/lib/pkgconfig), with an rpath to P/lib, and nothing from a clone.
package torch

/*
#cgo !torchspeed_pkgconfig CFLAGS: -I${SRCDIR}/../../csrc
#cgo !torchspeed_pkgconfig LDFLAGS: -L${SRCDIR}/../../build/cmake -ltorchspeed -Wl,-rpath,${SRCDIR}/../../build/cmake -Wl,-rpath,$ORIGIN
#cgo torchspeed_pkgconfig pkg-config: torchspeed
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

// APIVersion is the shim ABI version these bindings were written for.
const APIVersion = 6

var versionOnce sync.Once
var versionErr error

// checkShim verifies, once, that the loaded shim is at least as new as these bindings.
func checkShim() error {
	versionOnce.Do(func() {
		if v := int(C.ts_api_version()); v < APIVersion {
			versionErr = fmt.Errorf("libtorchspeed.so has API version %d, these bindings need %d: rebuild it with `make shim`", v, APIVersion)
		}
	})
	return versionErr
}
