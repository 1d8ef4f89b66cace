// Package zerocheck calls every exported method of a handle type on a nil and on a zero-value
// receiver, with zero arguments, and reports the methods that panic or that return a nil error
// where they return one: the Go API must refuse handles it did not make, not crash the caller.
package zerocheck

import (
	"fmt"
	"reflect"
	"testing"
)

var errorType = reflect.TypeOf((*error)(nil)).Elem()

// Receivers checks every exported method of *T on (*T)(nil) and on new(T). Methods named in
// mayReturnNil may return a nil error there (Close, which is idempotent and accepts nil, as
// free(NULL) does); methods without an error result only must not panic.
func Receivers[T any](t *testing.T, mayReturnNil ...string) {
	t.Helper()
	typ := reflect.TypeOf((*T)(nil))
	if typ.NumMethod() == 0 {
		t.Fatalf("%s has no exported methods", typ)
	}
	for _, recv := range []struct {
		name string
		v    reflect.Value
	}{{"nil", reflect.Zero(typ)}, {"zero value", reflect.New(typ.Elem())}} {
		for i := 0; i < typ.NumMethod(); i++ {
			m := typ.Method(i)
			t.Run(fmt.Sprintf("%s.%s on %s", typ.Elem().Name(), m.Name, recv.name), func(t *testing.T) {
				args := []reflect.Value{recv.v}
				n := m.Type.NumIn()
				if m.Type.IsVariadic() {
					n-- // no variadic arguments
				}
				for j := 1; j < n; j++ {
					args = append(args, reflect.Zero(m.Type.In(j)))
				}
				var out []reflect.Value
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("panicked: %v", r)
						}
					}()
					out = m.Func.Call(args)
				}()
				if len(out) == 0 {
					return
				}
				last := out[len(out)-1]
				if last.Type() != errorType || !last.IsNil() {
					return
				}
				for _, ok := range mayReturnNil {
					if ok == m.Name {
						return
					}
				}
				t.Errorf("returned no error")
			})
		}
	}
}
