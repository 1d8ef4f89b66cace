// Package torch is torchspeed's only cgo package: Go types over the C ABI in csrc/abi/torchspeed.h,
// which wraps libtorch. Every other package speaks the Go types here.
//
// The shim library is built by CMake into build/cmake (make shim). Programs built from this
// tree find it through an rpath into build/cmake, so `go build` and `go test` need no set-up.
// Programs built against an installed library (make install PREFIX=P) use the build tag
// torchspeed_pkgconfig: the header and library then come from pkg-config's torchspeed.pc
// (PKG_CONFIG_PATH=P/lib/pkgconfig), with an rpath to P/lib, and nothing from a clone.
package torch

/*
#cgo !torchspeed_pkgconfig CFLAGS: -I${SRCDIR}/../../csrc/abi
#cgo !torchspeed_pkgconfig LDFLAGS: -L${SRCDIR}/../../build/cmake -ltorchspeed -Wl,-rpath,${SRCDIR}/../../build/cmake -Wl,-rpath,$ORIGIN
#cgo torchspeed_pkgconfig pkg-config: torchspeed
#include <stdlib.h>
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// APIVersion is the shim ABI version these bindings were written for.
const APIVersion = 27

// The libtorch releases torchspeed supports: 1.13 (Debian 12) through the 2.x releases that
// still ship TorchScript and the graph-mode quantization passes (their removal is proposed
// around 2.10).
const (
	minLibtorch = "1.13"
	maxLibtorch = "2.9"
)

var versionOnce sync.Once
var versionErr error

// checkShim verifies, once, that the loaded shim is at least as new as these bindings and that
// it was built against a supported libtorch.
func checkShim() error {
	versionOnce.Do(func() {
		if v := int(C.ts_api_version()); v < APIVersion {
			versionErr = fmt.Errorf("libtorchspeed.so has API version %d, these bindings need %d: rebuild it with `make shim`", v, APIVersion)
			return
		}
		versionErr = checkLibtorchVersion(Version())
	})
	return versionErr
}

// checkLibtorchVersion refuses a libtorch outside minLibtorch..maxLibtorch.
func checkLibtorchVersion(v string) error {
	have, ok := parseMajorMinor(v)
	lo, _ := parseMajorMinor(minLibtorch)
	hi, _ := parseMajorMinor(maxLibtorch)
	if !ok || have[0] < lo[0] || (have[0] == lo[0] && have[1] < lo[1]) || have[0] > hi[0] || (have[0] == hi[0] && have[1] > hi[1]) {
		return &Error{Op: "libtorch", Code: Unsupported, Msg: fmt.Sprintf("libtorchspeed.so was built against libtorch %q; torchspeed supports %s to %s (TorchScript and the graph-mode quantization passes): build it against a libtorch in that range (LIBTORCH_HOME, then make shim)", Clip(v), minLibtorch, maxLibtorch)}
	}
	return nil
}

func parseMajorMinor(v string) ([2]int, bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	// "1.13.1", "2.6.0+cpu": the minor ends at the first non-digit.
	minor := strings.TrimLeft(parts[1], "0123456789")
	mi, err2 := strconv.Atoi(strings.TrimSuffix(parts[1], minor))
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{major, mi}, true
}
