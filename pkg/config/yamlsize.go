package config

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// A config's YAML is read by viper into maps and lists with every alias expanded, then copied and
// walked several times more: anchors used inside anchors grow that without bound (nine aliases
// of nine aliases, six levels deep, is half a million nodes from 300 bytes, and stalled the
// config fuzzer for minutes). The document is parsed once without expanding anything, and its
// expanded size and depth checked, before viper sees it.
const (
	// MaxConfigNodes bounds the nodes of a config with its aliases expanded.
	MaxConfigNodes = 1 << 18
	// MaxConfigDepth bounds how deeply a config's maps and lists nest.
	MaxConfigDepth = 64
)

// checkYAMLSize refuses a document whose aliases expand past MaxConfigNodes nodes or that nests
// deeper than MaxConfigDepth. A document that does not parse is left to viper to report.
func checkYAMLSize(text []byte) error {
	if len(text) > MaxConfigBytes {
		return fmt.Errorf("%d bytes, more than the %d a config may be", len(text), MaxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	sizes := map[*yaml.Node]int{}
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return nil // the end, or an error viper reports with its own words
		}
		n, err := expandedSize(&doc, sizes, 0)
		if err != nil {
			return err
		}
		if n > MaxConfigNodes {
			return fmt.Errorf("its YAML expands to more than %d values with its aliases (*name) expanded: write the values out, or use fewer aliases of aliases", MaxConfigNodes)
		}
	}
}

var errTooDeep = fmt.Errorf("its YAML nests more than %d levels deep", MaxConfigDepth)

// expandedSize is the number of nodes n stands for with aliases expanded, saturating just past
// MaxConfigNodes; sizes memoizes anchored nodes, so each is counted once however often it is
// used.
func expandedSize(n *yaml.Node, sizes map[*yaml.Node]int, depth int) (int, error) {
	if n == nil {
		return 0, nil
	}
	if depth > MaxConfigDepth {
		return 0, errTooDeep
	}
	if s, ok := sizes[n]; ok {
		return s, nil
	}
	if n.Kind == yaml.AliasNode {
		return expandedSize(n.Alias, sizes, depth+1)
	}
	sizes[n] = MaxConfigNodes + 1 // an alias of an enclosing node (a cycle) counts as too many
	total := 1
	for _, c := range n.Content {
		s, err := expandedSize(c, sizes, depth+1)
		if err != nil {
			return 0, err
		}
		total = min(total+s, MaxConfigNodes+1)
	}
	sizes[n] = total
	return total, nil
}
