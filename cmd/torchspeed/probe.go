package main

import (
	"encoding/json"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/cpu"
)

func init() { extraCommands = append(extraCommands, newProbeCmd, newLaunchCmd) }

type probeCmd struct {
	root    string
	noTorch bool
	asJSON  bool
}

func newProbeCmd() *cobra.Command {
	p := &probeCmd{}
	c := &cobra.Command{
		Use:   "probe",
		Short: "Show what this machine offers to inference: ISA, cores, NUMA, cgroup limits, OpenMP, libtorch, and what hurts",
		Long: `probe reads the CPU (cpuid), the topology, NUMA nodes and caches (/sys), the cgroup CPU
quota and cpuset, the affinity mask, huge page settings, the OpenMP runtime and allocator
loaded, and libtorch's build, and ends with findings: each a problem and what to do.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return p.run(c) },
	}
	f := c.Flags()
	f.StringVar(&p.root, "root", "/", "directory holding the sys/ and proc/ trees to read (a copy from another machine; the ISA then comes from its proc/cpuinfo)")
	f.BoolVar(&p.noTorch, "no-torch", false, "leave out libtorch's build information")
	f.BoolVar(&p.asJSON, "json", false, "print JSON")
	return c
}

func (p *probeCmd) run(c *cobra.Command) error {
	opts := cpu.Options{Root: p.root}
	live := filepath.Clean(p.root) == "/"
	if live && !p.noTorch {
		// libtorch is linked into this binary, so its OpenMP runtime is already mapped
		// when the probe scans /proc/self/maps.
		opts.Torch = &cpu.TorchInfo{
			Version:           torch.Version(),
			ShowConfig:        torch.ShowConfig(),
			ParallelInfo:      torch.ParallelInfo(),
			QEngines:          torch.SupportedQEngines(),
			QEngine:           torch.QEngine(),
			NumThreads:        torch.NumThreads(),
			NumInteropThreads: torch.NumInteropThreads(),
		}
	}
	pr, err := cpu.Detect(opts)
	if err != nil {
		if !live {
			return usageError{err}
		}
		return err
	}
	out := c.OutOrStdout()
	if p.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(pr)
	}
	return pr.WriteText(out)
}
