package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/kernels"
)

type probeCmd struct {
	ui      *ui
	root    string
	noTorch bool
	asJSON  bool
	peak    bool
	peakDur time.Duration
	intrDur time.Duration
}

func newProbeCmd(u *ui) *cobra.Command {
	p := &probeCmd{ui: u}
	c := &cobra.Command{
		Use:   "probe",
		Short: "Show what this machine offers to inference (ISA, cores, NUMA, limits) and what hurts",
		Long: `probe reads the CPU (cpuid), the topology, NUMA nodes and caches (/sys), the cgroup CPU
quota and cpuset, the affinity mask, huge page settings, the OpenMP runtime and allocator
loaded, and libtorch's build, runs libtorch's oneDNN kernels once in a child process to see
that they give right results, and ends with findings: each a problem and what to do.

On the live machine it also spins one thread on each usable CPU for --interrupts (500ms) and
reports what the machine takes from them: interruptions per second, the share of time lost,
their lengths, and the p95/p50 those alone give a call of fixed work of 0.1, 1 and 10 ms. On
a VM this is the floor under any model's tail.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return p.run(c) },
	}
	f := c.Flags()
	f.StringVar(&p.root, "root", "/", "directory holding the sys/ and proc/ trees to read (a copy from another machine; the ISA then comes from its proc/cpuinfo)")
	f.BoolVar(&p.noTorch, "no-torch", false, "leave out libtorch's build information")
	f.BoolVar(&p.asJSON, "json", false, "print JSON")
	f.BoolVar(&p.peak, "peak", false, "also measure this machine's FP32 FMA and INT8 peaks and memory bandwidth (pkg/kernels)")
	f.DurationVar(&p.peakDur, "peak-duration", 200*time.Millisecond, "time spent on each peak figure")
	f.DurationVar(&p.intrDur, "interrupts", 500*time.Millisecond, "time spent measuring the interruptions of the usable CPUs, all busy at once (0: skip; 10ms to 1m)")
	return c
}

func (p *probeCmd) run(c *cobra.Command) error {
	opts := cpu.Options{Root: p.root}
	live := filepath.Clean(p.root) == "/"
	if c.Flags().Changed("interrupts") && p.intrDur != 0 {
		if !live {
			return exitcode.Usagef("probe --interrupts measures this machine: it cannot be combined with --root")
		}
		if p.intrDur < 10*time.Millisecond || p.intrDur > time.Minute {
			return exitcode.Usagef("--interrupts %v: want 0 (skip) or 10ms to 1m", p.intrDur)
		}
	}
	if live && !p.noTorch {
		// libtorch is linked into this binary, so its OpenMP runtime is already mapped
		// when the probe scans /proc/self/maps.
		info, err := torch.Info()
		if err != nil {
			return err
		}
		// Run in a child process: a oneDNN that crashes takes only the child with it.
		info.OneDNNCheck = oneDNNCheck(c.Context(), func(w string) { fmt.Fprintln(c.ErrOrStderr(), "warning:", w) })
		opts.Torch = info
	}
	pr, err := cpu.Detect(opts)
	if err != nil {
		if !live {
			return exitcode.New(exitcode.Usage, err)
		}
		return err
	}
	if p.intrDur != 0 && (live || c.Flags().Changed("interrupts")) {
		// As many busy threads as the process may run at once: more would meet the cgroup's
		// CPU quota, and its throttling is not the machine's.
		fmt.Fprintf(p.ui.logOrDiscard(c.ErrOrStderr()), "probe: measuring interruptions on %d of CPUs %v for %v...\n", pr.Usable.Count, pr.Usable.CPUs, p.intrDur)
		// A machine that refuses the measurement (no pinning in a sandbox) still gets the rest
		// of the probe, with a note saying what is missing.
		in, ierr := cpu.MeasureInterruptions(cpu.InterruptOptions{CPUs: pr.Usable.CPUs, Count: pr.Usable.Count, Duration: p.intrDur}, torch.MeasureGaps)
		opts.Interruptions = in
		if pr, err = cpu.Detect(opts); err != nil {
			return err
		}
		if ierr != nil {
			pr.Notes = append(pr.Notes, "interruptions not measured: "+ierr.Error())
		}
	}
	var peak *kernels.PeakResult
	if p.peak {
		if !live {
			return exitcode.Usagef("probe --peak measures this machine: it cannot be combined with --root")
		}
		log := p.ui.logOrDiscard(c.ErrOrStderr())
		start := time.Now()
		fmt.Fprintf(log, "probe: measuring FP32 and INT8 peaks and memory bandwidth on CPUs %v (%v per figure)...\n", pr.Usable.CPUs, p.peakDur)
		res, err := kernels.MeasurePeak(kernels.PeakOptions{CPUs: pr.Usable.CPUs, Duration: p.peakDur})
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "probe: peaks measured in %v\n", time.Since(start).Round(time.Millisecond))
		peak = &res
	}
	out := c.OutOrStdout()
	if p.asJSON {
		emptyLists(pr)
		if peak != nil {
			emptyLists(peak)
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if peak == nil {
			return enc.Encode(pr)
		}
		return enc.Encode(struct {
			*cpu.Probe
			Peak *kernels.PeakResult `json:"peak"`
		}{pr, peak})
	}
	if err := pr.WriteText(out); err != nil {
		return err
	}
	if peak != nil {
		writePeak(out, peak)
	}
	return nil
}

func writePeak(w io.Writer, r *kernels.PeakResult) {
	fmt.Fprintf(w, "\nPeak (measured on CPUs %v, clock %.2f GHz from %s)\n", r.CPUs, r.FrequencyHz/1e9, r.FrequencySource)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  kernel\tper core\tall cores\ttheoretical per core\t% of theoretical")
	row := func(f kernels.ComputeFigure, unit string) {
		// No theoretical figure (the clock or the unit count is unknown) prints as "-", not 0.0.
		theory, pct := "-", "-"
		if f.TheoreticalPerCore > 0 {
			theory = fmt.Sprintf("%.1f %s", f.TheoreticalPerCore/1e9, unit)
			pct = fmt.Sprintf("%.0f%%", 100*f.PerCore/f.TheoreticalPerCore)
		}
		fmt.Fprintf(tw, "  %s\t%.1f %s\t%.1f %s\t%s\t%s\n", f.ISA, f.PerCore/1e9, unit, f.AllCores/1e9, unit, theory, pct)
	}
	for _, f := range r.FP32 {
		row(f, "GFLOP/s")
	}
	for _, f := range r.INT8 {
		row(f, "GOP/s")
	}
	tw.Flush()
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "  memory: read %.1f GB/s per core, %.1f GB/s all cores; copy %.1f / %.1f GB/s (buffer %d MiB)\n",
			m.ReadPerCore/1e9, m.ReadAllCores/1e9, m.CopyPerCore/1e9, m.CopyAllCores/1e9, m.BufferBytes>>20)
	}
	if r.TheoreticalNote != "" {
		fmt.Fprintf(w, "  theoretical: %s\n", r.TheoreticalNote)
	}
}
