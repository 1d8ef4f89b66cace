package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"errors"
	"strings"
	"unsafe"
)

// Error is a failure reported by libtorch through the shim.
type Error struct {
	Op  string // the shim operation, e.g. "load", "forward"
	Msg string // libtorch's message, without its C++ backtrace
	// Detail is the full message when Msg was shortened (TorchScript interpreter tracebacks).
	Detail string
}

func (e *Error) Error() string { return e.Op + ": " + e.Msg }

// ErrClosed is returned by every method of a Module or Tensor after Close.
var ErrClosed = errors.New("torch: use of a closed handle")

// statusErr turns a ts_status into an *Error and frees it. A nil status is success.
func statusErr(s *C.ts_status) error {
	if s == nil {
		return nil
	}
	msg := C.GoString(C.ts_status_message(s))
	C.ts_status_free(s)
	op, rest, ok := strings.Cut(msg, ": ")
	if !ok {
		return &Error{Op: "torch", Msg: msg}
	}
	return &Error{Op: op, Msg: rest}
}

// takeString copies and frees a string the shim returned.
func takeString(p *C.char) string {
	if p == nil {
		return ""
	}
	s := C.GoString(p)
	C.ts_free(unsafe.Pointer(p))
	return s
}
