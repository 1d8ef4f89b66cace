package main

import (
	"fmt"
	"path/filepath"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/config"
)

// valueFiles lists the files that --input values and a config's model.inputs data read.
func valueFiles(values []string, cfgInputs []config.Input) []safefile.Named {
	var out []safefile.Named
	for _, v := range values {
		_, text := config.SplitInput(v)
		if src, err := config.ParseSource(text); err == nil {
			out = append(out, config.SourceFiles("--input "+v, src)...)
		}
	}
	for i, in := range cfgInputs {
		if in.Data == "" {
			continue
		}
		if src, err := config.ParseSource(in.Data); err == nil {
			out = append(out, config.SourceFiles(fmt.Sprintf("model.inputs[%d].data", i), src)...)
		}
	}
	return out
}

// checkNotInput refuses, as a usage error, a command whose outputs would replace one of its
// inputs (bench --benchfmt M.pt on model M.pt).
func checkNotInput(cmd string, outputs, inputs []safefile.Named) error {
	if err := safefile.CheckNotInput(outputs, inputs); err != nil {
		return exitcode.Usagef("%s: %v", cmd, err)
	}
	return nil
}

// files names paths: what[i] for each.
func named(what string, paths ...string) []safefile.Named {
	var out []safefile.Named
	for _, p := range paths {
		out = append(out, safefile.Named{What: what, Path: p})
	}
	return out
}

// benchPlotFiles are the plots bench writes into dir.
func benchPlotFiles(dir string) []string {
	var out []string
	for _, base := range []string{"bench_latency", "bench_sweep"} {
		for _, ext := range []string{".png", ".svg"} {
			out = append(out, filepath.Join(dir, base+ext))
		}
	}
	return out
}
