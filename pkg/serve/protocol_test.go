package serve

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// The fast path parses exactly what encoding/json does, or steps aside for it.
func TestFastFlatAgreesWithJSON(t *testing.T) {
	for _, raw := range []string{
		`[]`, ` [ ] `, `[1]`, `[1,2,3]`, ` [ -1.5 , 2e3,0.25E-2 ] `, `[0]`, `[-0]`, `[3.4028235e38]`, `[1e39]`,
		`[01]`, `[+1]`, `[.5]`, `[1.]`, `[1e]`, `[1,]`, `[,1]`, `[1 2]`, `["1"]`, `[true]`, `[[1]]`, `[1]x`,
		`[9223372036854775807]`, `[9223372036854775808]`, `[2147483648]`, `[1.0]`, `[1e2]`, `[`, `{}`, `null`,
	} {
		check(t, raw, fastFlat[float32], "float32")
		check(t, raw, fastFlat[float64], "float64")
		check(t, raw, fastFlat[int64], "int64")
		check(t, raw, fastFlat[int32], "int32")
	}
}

func check[T comparable](t *testing.T, raw string, fast func([]byte) ([]T, bool), name string) {
	t.Helper()
	got, ok := fast([]byte(raw))
	var want []T
	err := json.Unmarshal([]byte(raw), &want)
	if !ok {
		return // encoding/json decides
	}
	if err != nil || !slices.Equal(got, want) || (want == nil) != (got == nil) && len(want) > 0 {
		t.Errorf("%s %s: fast path gave %v, encoding/json %v (%v)", name, raw, got, want, fmt.Sprint(err))
	}
}
