package main

import (
	"strings"
	"testing"
)

// --memory takes Kubernetes quantities and refuses what Kubernetes or libtorch could not run.
func TestParseQuantity(t *testing.T) {
	for in, want := range map[string]int64{"2Gi": 2 << 30, "512Mi": 512 << 20, "1G": 1e9, "134217728": 128 << 20} {
		if got, err := parseQuantity(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{"2GB": "whole number", "-1Gi": "whole number", "1.5Gi": "whole number", "": "whole number", "1Mi": "under 64Mi", "99999999999Ti": "whole number"} {
		if _, err := parseQuantity(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error with %q", in, err, msg)
		}
	}
}
