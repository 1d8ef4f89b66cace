package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// Code classifies a failure, as the shim's ts_code enum does. Callers branch on codes with
// errors.Is(err, torch.NotFound), never on message text. A Code is itself an error so that it
// can be the target of errors.Is.
type Code int32

// Failure codes. Values equal the shim's TS_CODE_* constants.
const (
	// InvalidArgument: a NULL, out-of-range or malformed argument (shape, dtype, config JSON).
	InvalidArgument Code = 1
	// NotFound: a named thing does not exist (method, extra file, engine, submodule).
	NotFound Code = 2
	// OutOfMemory: an allocation failed.
	OutOfMemory Code = 3
	// ModelError: the model's own code or libtorch's checks failed while compiling or running it.
	ModelError Code = 4
	// Unsupported: valid, but this libtorch build or torchspeed cannot do it.
	Unsupported Code = 5
	// IOError: reading or writing a file failed.
	IOError Code = 6
	// Corrupt: an archive is damaged, truncated or not a TorchScript archive.
	Corrupt Code = 7
	// Internal: anything else (an unknown C++ exception).
	Internal Code = 8
)

var codeNames = map[Code]string{
	InvalidArgument: "invalid argument", NotFound: "not found", OutOfMemory: "out of memory",
	ModelError: "model error", Unsupported: "unsupported", IOError: "I/O error", Corrupt: "corrupt archive",
	Internal: "internal error",
}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code(%d)", int32(c))
}

// Error makes a Code usable as an errors.Is target.
func (c Code) Error() string { return "torch: " + c.String() }

// Error is a failure reported by libtorch through the shim, or a bad argument refused by these
// bindings before calling it.
type Error struct {
	Op   string // the shim operation, e.g. "load", "forward"
	Code Code
	Msg  string // libtorch's message, without its C++ backtrace
	// Detail is the full message when Msg was shortened (TorchScript interpreter tracebacks).
	Detail string
	// Errno is the failed system call's error for IOError (e.g. syscall.ENOSPC), else 0.
	Errno syscall.Errno
}

func (e *Error) Error() string { return e.Op + ": " + e.Msg }

// Unwrap exposes Errno, so that errors.Is(err, syscall.ENOSPC) sees a full disk.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// Is reports whether target is e's Code, so that errors.Is(err, torch.NotFound) works.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// ErrClosed is returned by every method of a Module or Tensor after Close.
var ErrClosed = errors.New("torch: use of a closed handle")

// statusErr turns a ts_status into an *Error and frees it. A nil status is success.
func statusErr(s *C.ts_status) error {
	if s == nil {
		return nil
	}
	code := Code(C.ts_status_code(s))
	op := C.GoString(C.ts_status_op(s))
	msg := C.GoString(C.ts_status_reason(s))
	errno := syscall.Errno(C.ts_status_errno(s))
	C.ts_status_free(s)
	return &Error{Op: op, Code: code, Msg: msg, Errno: errno}
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

// maxEcho bounds any value repeated in an error message: a 200 MB manifest string was once
// echoed whole.
const maxEcho = 200

// Clip shortens s for an error message to at most about 200 bytes, saying how much was cut.
func Clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... (%d more bytes)", len(s)-cut)
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
