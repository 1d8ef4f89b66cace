package config

import (
	"errors"
	"fmt"
	"slices"
)

// Validate checks the quantize section's values, naming the key, the bad value and what is
// allowed. Config.Validate runs it, and pkg/quant's Options.Validate runs it on the keys the
// two share, so a value is checked one way wherever it comes from.
func (q Quantize) Validate() error {
	var errs []error
	bad := func(key string, val any, allowed string) {
		errs = append(errs, fmt.Errorf("%s: %v is not allowed: %s", key, val, allowed))
	}
	if !slices.Contains([]string{"none", "static", "dynamic", "auto"}, q.Mode) {
		bad("quantize.mode", q.Mode, "none, static, dynamic or auto")
	}
	if !slices.Contains([]string{"auto", "x86", "fbgemm", "onednn", "qnnpack"}, q.Engine) {
		bad("quantize.engine", q.Engine, "auto, x86, fbgemm, onednn or qnnpack")
	}
	if !slices.Contains([]string{"minmax", "moving_average", "histogram", "percentile"}, q.Observer) {
		bad("quantize.observer", q.Observer, "minmax, moving_average, histogram or percentile")
	}
	if q.Percentile <= 50 || q.Percentile > 100 {
		bad("quantize.percentile", q.Percentile, "between 50 and 100, e.g. 99.99")
	}
	if q.ReduceRange != Auto && q.ReduceRange != On && q.ReduceRange != Off {
		bad("quantize.reduce_range", q.ReduceRange, "auto, true or false")
	}
	if q.MaxFallbackLayers < 0 {
		bad("quantize.max_fallback_layers", q.MaxFallbackLayers, "must be >= 0")
	}
	return errors.Join(errs...)
}
