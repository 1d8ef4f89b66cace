package torch

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckLibtorchVersion(t *testing.T) {
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{"1.13.1", true}, {"1.13.0a0+git", true}, {"2.0.1", true}, {"2.6.0+cpu", true}, {"2.9.0", true},
		{"1.12.1", false}, {"1.8.0", false}, {"2.10.0", false}, {"3.0.0", false}, {"", false}, {"banana", false},
	} {
		err := checkLibtorchVersion(c.v)
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok=%v", c.v, err, c.ok)
		}
		if err != nil && (!errors.Is(err, Unsupported) || !strings.Contains(err.Error(), "1.13 to 2.9")) {
			t.Errorf("%q: message %q does not give the supported range", c.v, err)
		}
	}
	// The shim this test runs with is in range.
	if err := checkShim(); err != nil {
		t.Fatal(err)
	}
}
