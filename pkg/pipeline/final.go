package pipeline

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// finalBench measures the chosen model against the original, interleaved, with the configured
// run count: the speedup the report states. When the original's p50 moved by more than
// baselineShiftLimit since an earlier measurement at the same thread count, it measures once
// more; if the move persists, the report and the log warn.
func (r *run) finalBench() error {
	final := r.best()
	if final == r.orig {
		r.warn("no step made the model faster on this machine: the artifact is the original (frozen where possible)")
	}
	opts := bench.CompareOptions{
		Options: bench.Options{Runs: r.cfg.Bench.Runs, Duration: r.cfg.Bench.Duration, Warmup: r.cfg.Bench.Warmup},
		Order:   bench.Shuffled, Seed: r.cfg.Bench.Seed,
	}
	if !r.deadline.IsZero() {
		// The budget's end bounds the final benchmark too: the rounds become a maximum.
		limit := max(time.Second, r.left()*9/10)
		if opts.Runs > 0 {
			opts.MaxRuns, opts.Runs = opts.Runs, 0
			opts.Duration = limit
		} else {
			opts.Duration = min(opts.Duration, limit)
		}
	}
	if r.cfg.Bench.Duration > 0 {
		r.logf("final benchmark: original vs %s, interleaved rounds for %v", final.name, r.cfg.Bench.Duration)
	} else {
		r.logf("final benchmark: original vs %s, %d interleaved rounds", final.name, r.cfg.Bench.Runs)
	}
	opt := *final
	opt.name, opt.meas = "optimized", nil
	m, err := r.measure("final", []*candidate{&opt}, opts)
	if err != nil {
		return fmt.Errorf("final benchmark: %w", err)
	}
	if shift := r.baselineShift(m); shift != "" && (r.quick() || !r.deadline.IsZero()) {
		// Measuring again would double the final benchmark's time: the quick search (and a
		// budget) says so instead.
		again := "the quick search does not measure it again; --search full does"
		if !r.quick() {
			again = "not measured again: " + r.budgetNote()
		}
		r.warn("the machine's load changed during the run: " + shift + " (" + again + "); the speedups of different tables are not comparable: rerun on a quiet machine")
	} else if shift != "" {
		r.logf("re-measuring the final benchmark: %s", shift)
		m.replaced = true
		opt.meas = nil
		if m, err = r.measure("final, re-measured", []*candidate{&opt}, opts); err != nil {
			return fmt.Errorf("final benchmark: %w", err)
		}
		if shift := r.baselineShift(m); shift != "" {
			r.warn("the machine's load changed during the run: " + shift + " (measured twice); the speedups of different tables are not comparable: rerun on a quiet machine")
		}
	}
	r.finalMeas = m
	o, n := m.cmp.Results[0].Stats, m.cmp.Results[1].Stats
	p := m.cmp.Pairs[0]
	b := &report.Bench{
		Measurement: m.name, Runs: m.cmp.Rounds, Threads: m.threads, Precision: final.precision, Optimized: final.name,
		OriginalP50: msOf(o.P50), OriginalP90: msOf(o.P90), OriginalP95: msOf(o.P95), OriginalP99: msOf(o.P99),
		OptimizedP50: msOf(n.P50), OptimizedP90: msOf(n.P90), OptimizedP95: msOf(n.P95), OptimizedP99: msOf(n.P99),
		Throughput: n.Throughput, UTestP: p.UTest.P,
	}
	if n.P50 > 0 {
		b.Speedup = float64(o.P50) / float64(n.P50)
	}
	if p.RatioLo > 0 && p.RatioHi > 0 {
		b.SpeedupLo, b.SpeedupHi = 1/p.RatioHi, 1/p.RatioLo
	}
	// The verdict quotes the ratio of the p50s as printed, the one speedup every table shows.
	b.Verdict, b.Significant = report.Verdict(report.RoundedSpeedup(b.OriginalP50, b.OptimizedP50), b.SpeedupLo, b.SpeedupHi, p.UTest.P)
	r.interruptions(b, n.P50, m.threads)
	r.rep.Bench = b
	for _, w := range append(p.Warnings, n.Warnings...) {
		r.rep.Warnings = append(r.rep.Warnings, "final benchmark: "+w)
	}
	r.rep.Stages = r.stageRows()
	r.rep.Measurements = r.measurementRows()
	r.rep.Settings = settingsOf(r.opts.Settings, m.threads)
	r.roofline()
	return nil
}

// interruptions measures, after the final benchmark, what the machine takes from as many of
// the process's CPUs as the benchmark ran threads, and adds the p95/p50 that alone gives fixed
// work as long as the optimized p50. A machine that refuses it (no pinning) gets a log line.
func (r *run) interruptions(b *report.Bench, p50 time.Duration, threads int) {
	in, err := cpu.MeasureInterruptions(cpu.InterruptOptions{Count: threads, Duration: cpu.DurationFor(p50, 300*time.Millisecond)}, torch.MeasureGaps)
	if err != nil {
		r.logf("the machine's interruptions were not measured: %v", err)
		return
	}
	in.AddFloor(p50, threads)
	b.Interruptions = in
}

// settingsOf types the runtime settings the caller applied at start (Options.Settings) and
// puts in the thread count the final benchmark actually ran with: when it was chosen by
// measurement after start, the environment's thread variables no longer describe the run, and
// a note says so.
func settingsOf(m map[string]string, threads int) report.Settings {
	s := report.Settings{Threads: threads}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var applied []string
	for _, k := range keys {
		v := m[k]
		switch {
		case k == "threads":
			if n, err := strconv.Atoi(v); err == nil && n != threads {
				s.Notes = append(s.Notes, fmt.Sprintf("threads were %d at start; the final benchmark ran %d (chosen by measurement, set with at::set_num_threads)", n, threads))
			}
		case k == "interop_threads":
			if n, err := strconv.Atoi(v); err == nil {
				s.InteropThreads = intp(n)
			}
		case k == "numa_node":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				s.NUMANode = intp(n)
			}
		case k == "cpus":
			s.CPUs = strp(v)
		case k == "openmp":
			s.OpenMP = strp(v)
		case k == "mode":
			s.Mode = strp(v)
		case k == "allocator":
			if v != "-" && v != "" {
				s.Allocator = strp(v)
			}
		case k == "blas":
			s.BLAS = strp(v)
		case strings.HasPrefix(k, "env "):
			name := strings.TrimPrefix(k, "env ")
			if (name == "OMP_NUM_THREADS" || name == "OPENBLAS_NUM_THREADS" || name == "MKL_NUM_THREADS") && v != strconv.Itoa(threads) {
				s.Notes = append(s.Notes, fmt.Sprintf("%s=%s was set at start; the final benchmark ran %s (set at run time with at::set_num_threads and openblas_set_num_threads)", name, v, report.Plural(threads, "intra-op thread")))
			}
			s.Env = append(s.Env, report.EnvVar{Name: name, Value: v})
		case strings.HasPrefix(k, "applied "):
			applied = append(applied, k)
		default:
			s.Env = append(s.Env, report.EnvVar{Name: k, Value: v})
		}
	}
	// "applied 1".."applied 12" in numeric order.
	sort.Slice(applied, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(applied[i], "applied "))
		b, _ := strconv.Atoi(strings.TrimPrefix(applied[j], "applied "))
		return a < b
	})
	for _, k := range applied {
		s.Applied = append(s.Applied, m[k])
	}
	return s
}

func (r *run) manifest(final *candidate) *torchspeed.Manifest {
	m := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: version.Version, Libtorch: torch.Version(),
		Created: time.Now().UTC(), SourceName: filepath.Base(r.cfg.Model.Path), SourceSHA256: r.rep.Model.SHA256,
		LoadPasses: final.passes, ChannelsLast: final.channelsLast, Precision: final.precision,
		QEngine: final.engine, FP32Layers: final.fp32Layers, Steps: final.steps,
		Runtime:      torchspeed.Runtime{Threads: torch.NumThreads(), InteropThreads: r.cfg.Runtime.InteropThreads, Allocator: r.cfg.Runtime.Allocator},
		QuantizedOps: final.quantizedOps, CPU: torchspeed.CPUOf(r.opts.Machine),
	}
	if (final.precision == "int8-static" || final.precision == "int8-dynamic") && r.rep.Quantize != nil {
		m.ActivationBits = 8
		if r.rep.Quantize.ReduceRange {
			m.ActivationBits = 7
		}
	}
	if len(m.QuantizedOps) == 0 {
		m.QuantizedOps = nil
	}
	if c := r.runtime; c.Name != "" {
		m.Runtime.Candidate, m.Runtime.WaitPolicy, m.Runtime.SpinCount = c.Name, c.WaitPolicy, c.SpinCount
		m.Runtime.HugePages, m.Runtime.CPUCapability, m.Runtime.BLASCore = c.HugePages, c.CPUCapability, c.BLASCore
		m.Runtime.OpenMP = r.opts.Settings["openmp"]
		if c.Allocator != "" && (c.Allocator != "default" || c.HugePages) {
			// glibc's huge pages were measured with glibc malloc, whatever the config's.
			m.Runtime.Allocator = c.Allocator
		}
	}
	if m.LoadPasses == nil {
		m.LoadPasses = []string{}
	}
	if len(m.LoadPasses) == 0 && final.precision == "fp32" && slices.Contains(final.steps, "freeze") {
		m.LoadPasses = []string{torchspeed.PassFreeze}
	}
	for _, in := range r.cfg.Model.Inputs {
		spec := inputSpec(in)
		if in.IsTensor() && len(spec.Shape) == 0 {
			// A tensor given as data only: a caller without the file (bench of the artifact)
			// can still make inputs of the data's shape.
			spec.Shape, spec.DType = r.dataShape(in.Name, spec.DType)
		}
		m.Inputs = append(m.Inputs, spec)
	}
	if k := r.call; k != nil {
		if k.method != "forward" {
			m.Method = k.method
		}
		m.Stateful, m.StateAttributes, m.ResetMethod = k.stateful(), k.state, k.reset
		// What Load's re-freeze must keep: the optimized method, the reset method, the
		// configured ones.
		m.PreserveMethods = k.preserve
	}
	// JSON cannot hold NaN or infinities: a non-finite figure is left out of the manifest
	// (the report lists it as null, in non_finite).
	m.Validation = map[string]float64{}
	add := func(k string, v *float64) {
		if v != nil && finite(*v) {
			m.Validation[k] = *v
		}
	}
	if v := r.rep.Validation; v != nil {
		x := v.Metrics
		add("cosine", x.Cosine)
		add("min_sample_cosine", x.MinSampleCosine)
		add("max_abs_error", x.MaxAbsError)
		add("mean_abs_error", x.MeanAbsError)
		add("top1_agreement", x.Top1Agreement)
		add("kl_divergence", x.KLDivergence)
		add("top1_original", x.Top1Original)
		add("top1_checked", x.Top1Checked)
		add("accuracy_drop_points", x.AccuracyDropPoints)
	} else {
		add("max_abs_error", &final.maxAbs)
		add("cosine", &final.cosine)
	}
	return m
}

// inputSpec is one configured argument as the manifest records it: a tensor's shape, dtype
// and batch dimension, or a constant's type and value.
func inputSpec(in config.Input) torchspeed.InputSpec {
	spec := torchspeed.InputSpec{Name: in.Name, Shape: in.Shape, DType: in.DType}
	if !in.IsTensor() {
		spec.Shape, spec.DType, spec.Type = nil, "", in.Type
		if in.Data != "" { // tensors from data: the caller passes them
			return spec
		}
		if raw, err := json.Marshal(in.Value); err == nil { // checked by newCaller
			spec.Value = raw
		}
		return spec
	}
	if in.Type != "" {
		spec.Type = in.Type
	}
	if d, ok := in.Batch(); !ok {
		spec.BatchDim = intp(-1)
	} else if d != 0 {
		spec.BatchDim = intp(d)
	}
	return spec
}

// dataShape is the per-call shape and dtype of the tensor input name given as data only (no
// shape in the config): the data's, read when the inputs were made; dtype unchanged when none.
func (r *run) dataShape(name, dtype string) ([]int64, string) {
	if r.call != nil {
		for _, t := range r.call.tensors {
			if t.Name == name && len(t.Shape) > 0 {
				return t.Shape, t.DType
			}
		}
	}
	return nil, dtype
}
