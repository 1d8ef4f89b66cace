package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/config"
)

// The values of the enum flags, for their help and shell completion.
var (
	allocators = []string{"default", "jemalloc", "tcmalloc"}
	modes      = []string{"latency", "throughput"}
	dtypes     = []string{"float32", "float64", "int64", "int32", "uint8", "bool"}
	quantModes = []string{"none", "static", "dynamic", "auto"}
	engines    = []string{"auto", "x86", "fbgemm", "onednn", "qnnpack"}
)

// completeEnums registers shell completion for flags that take one of a fixed set of values.
func completeEnums(c *cobra.Command, enums map[string][]string) {
	for name, values := range enums {
		_ = c.RegisterFlagCompletionFunc(name, fixedCompletion(values...))
	}
}

// loadConfig merges a command's flags (bound to config keys through keys: flag name -> dotted
// key), the TORCHSPEED_* variables, the config file at path ("" for none) and the defaults.
// full asks for a complete job (model.path and model.inputs); otherwise only the values given
// are checked. An error names the flag the user typed where a flag set the bad value; it is a
// usage error (exit 2).
func loadConfig(cmd, path string, flags *pflag.FlagSet, keys map[string]string, full bool) (*config.Config, error) {
	cfg, err := config.LoadValues(path, flags, keys, full)
	if err != nil {
		// Without a file the values came from flags and variables, which the message names.
		msg := strings.TrimPrefix(err.Error(), "config (flags and defaults): ")
		for flag, key := range keys {
			if fl := flags.Lookup(flag); fl != nil && fl.Changed {
				msg = strings.ReplaceAll(msg, key+":", "--"+flag+" ("+key+"):")
			} else if env := config.EnvName(key); os.Getenv(env) != "" {
				msg = strings.ReplaceAll(msg, key+":", key+" (from "+env+"):")
			}
		}
		return nil, exitcode.Usagef("%s: %s", cmd, msg)
	}
	return cfg, nil
}

// parseInputs reads --input-shape and --dtype values (or the same from a config or a
// manifest, which what names) into inputs to make, refusing sizes that cannot be allocated
// before anything is: the message names the input, and the error is a usage error (exit 2).
func parseInputs(what string, shapes, dts []string) ([]benchrun.InputSpec, error) {
	var specs []benchrun.InputSpec
	var checks []config.InputSpec
	for i, s := range shapes {
		shape, err := config.ParseShape(s)
		if err != nil {
			return nil, exitcode.Usagef("%s %q: %v", what, s, err)
		}
		dt, name := torch.Float32, "float32"
		if i < len(dts) && dts[i] != "" {
			if dt, err = torch.ParseDType(dts[i]); err != nil {
				return nil, exitcode.Usagef("%s: --dtype %q: %v", what, dts[i], err)
			}
			name = dts[i]
		}
		specs = append(specs, benchrun.InputSpec{Shape: shape, DType: dt})
		checks = append(checks, config.InputSpec{Name: fmt.Sprintf("input %d", i), Shape: shape, DType: name})
	}
	if err := config.CheckInputs(what, checks); err != nil {
		return nil, exitcode.New(exitcode.Usage, err)
	}
	return specs, nil
}
