package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Aliases of aliases expand inside viper before anything else sees the values: a document whose
// expansion passes MaxConfigNodes, nests past MaxConfigDepth or refers to itself is refused
// from its parsed form, quickly, naming the config; one that stays under keeps loading.
func TestHostileYAMLExpansion(t *testing.T) {
	wide := func(keys, uses int) string {
		var b strings.Builder
		b.WriteString("a: &a {")
		for i := range keys {
			fmt.Fprintf(&b, "k%d: v, ", i)
		}
		b.WriteString("}\nb: &b [" + strings.Repeat("*a, ", uses) + "]\n")
		return b.String()
	}
	deep := strings.Repeat("[", MaxConfigDepth+2) + strings.Repeat("]", MaxConfigDepth+2)
	for _, c := range []struct {
		name, text, want string
	}{
		{"2000 keys used 150 times", wide(2000, 150), "expands to more than 262144 values"},
		{"nested past the depth", "x: " + deep + "\n", "nests more than 64 levels"},
		{"an anchor inside itself", "a: &a [1, *a]\n", "expands to more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, err := loadValues("c.yaml", []byte(c.text), nil, nil, false)
			if err == nil || !strings.Contains(err.Error(), `config "c.yaml"`) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			t.Logf("%v: %v", time.Since(start), err)
		})
	}
	// Under the bound, aliases still work.
	c, err := loadValues("c.yaml", []byte("model: {path: m.pt, inputs: [{name: x, shape: &s [1, 2]}, {name: y, shape: *s}]}\n"), nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Model.Inputs) != 2 || len(c.Model.Inputs[1].Shape) != 2 {
		t.Fatalf("inputs %+v", c.Model.Inputs)
	}
}
