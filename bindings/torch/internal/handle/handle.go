// Package handle lets bindings/torch's internal packages (kerneltest) reach the C handles behind
// torch's types without widening torch's public API: torch fills these in when it is
// initialized. The values are untyped (any, unsafe.Pointer) because this package cannot import
// torch.
package handle

import "unsafe"

var (
	// Tensors takes the guards of the *torch.Tensor values in ts (each handle once; nil entries
	// give nil pointers) and returns their ts_tensor pointers, and a release for the guards.
	Tensors func(ts ...any) (ptrs []unsafe.Pointer, release func(), err error)
	// WrapTensor makes a *torch.Tensor (returned as any) own a new ts_tensor reference.
	WrapTensor func(ptr unsafe.Pointer) any
	// StatusErr turns a ts_status pointer (nil: success) into torch's error and frees it.
	StatusErr func(st unsafe.Pointer) error
)
