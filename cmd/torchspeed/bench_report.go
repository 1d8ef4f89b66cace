package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/plot"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// measure runs the sweep, the throughput streams or the latency rounds into rep.
func (b *benchCmd) measure(rep *bench.RunReport, models []*benchrun.Loaded, specs []benchrun.ModelSpec, ins []benchrun.InputSpec, plans []*callargs.Plan, sweepCfg bench.SweepConfig, log io.Writer) error {
	opts := bench.Options{Runs: b.runs, Duration: b.duration, Warmup: b.warmup}
	var err error
	switch {
	case b.sweeping():
		rep.Sweep, err = b.runSweep(models[0], ins, sweepCfg, opts, log)
		return err
	case b.streams > 1 && plans != nil:
		fmt.Fprintf(log, "bench: %s: %d streams x %d threads, a session each...\n", models[0].Spec.Name, b.streams, b.threads)
		rep.Throughput, err = benchrun.RunSessionStreams(models[0], plans[0].Method, plans[0], b.threads, b.streams, opts)
		return err
	case b.streams > 1:
		fmt.Fprintf(log, "bench: %s: %d streams x %d threads...\n", models[0].Spec.Name, b.streams, b.threads)
		rep.Throughput, err = benchrun.RunStreams(models[0], ins, 0, b.threads, b.streams, opts, b.seed)
		return err
	}
	inputs, err := benchrun.MakeInputs(ins, 0, b.seed)
	if err != nil {
		return err
	}
	defer benchrun.CloseTensors(inputs)
	var targets []bench.Target
	for i, l := range models {
		if plans == nil {
			targets = append(targets, l.Target(inputs))
			continue
		}
		t, err := l.SessionTarget(plans[i].Method, plans[i])
		if err != nil {
			return err
		}
		defer t.Close()
		targets = append(targets, t)
	}
	order, _ := bench.ParseOrder(b.order)
	fmt.Fprintf(log, "bench: %s...\n", describeRun(specs, opts, order))
	// The whole timing loop runs on one inference worker thread, which owns the OpenMP pool
	// the threads setting applies to.
	torch.Do(func() {
		if len(targets) == 1 {
			var r *bench.Result
			if r, err = bench.Run(targets[0], opts); err == nil {
				rep.Results = []*bench.Result{r}
			}
			return
		}
		rep.Comparison, err = bench.Compare(targets, bench.CompareOptions{Options: opts, Order: order, Seed: b.seed})
	})
	if err != nil {
		return err
	}
	if b.intrDur > 0 {
		// The timings stand without it: a machine that refuses the measurement gets a warning.
		if err := b.measureInterruptions(rep, log); err != nil {
			fmt.Fprintln(log, "bench: warning: the machine's interruptions were not measured:", err)
		}
	}
	if b.profile {
		if rep.Profiles, err = b.profileModels(models, inputs, plans, opts, log); err != nil {
			return err
		}
	}
	if plans != nil {
		for i, r := range rep.LatencyResults() {
			r.Load = models[i].LoadTime
		}
		return nil // rooflines count the FLOPs of tensor-only forwards
	}
	timed := make([]benchrun.Timed, len(models))
	for i, r := range rep.LatencyResults() {
		r.Load = models[i].LoadTime
		if len(ins) > 0 && len(ins[0].Shape) > 0 {
			r.Batch = int(ins[0].Shape[0])
		}
		l := models[i]
		timed[i] = benchrun.Timed{Name: l.Spec.Name, Path: l.Spec.Path, Module: l.Model.Module(), Manifest: l.Model.Manifest,
			SHA256: rep.Environment.ModelHashes[l.Spec.Name], P50: r.Stats.P50}
	}
	rep.Roofline = benchrun.Rooflines(timed, inputs, rep.Environment.Threads, func(name string, err error) {
		fmt.Fprintf(log, "bench: no roofline for %s: %v\n", name, err)
	})
	return nil
}

// profileModels profiles each model's ops, and an artifact measured alone beside its original
// (the manifest's source file, when it sits next to the artifact with the recorded digest). With
// plans (typed arguments, data, streams), each profiled run is one call as the timed runs make
// it; the original takes the artifact's.
func (b *benchCmd) profileModels(models []*benchrun.Loaded, inputs []*torch.Tensor, plans []*callargs.Plan, o bench.Options, log io.Writer) ([]*bench.OpProfile, error) {
	all := models
	if len(models) == 1 && models[0].IsArtifact() {
		orig, why := originalBeside(models[0], log)
		if orig != nil {
			defer orig.Model.Close()
			all = []*benchrun.Loaded{orig, models[0]}
			if plans != nil {
				plans = []*callargs.Plan{plans[0], plans[0]}
			}
		} else {
			fmt.Fprintf(log, "bench: --profile: %s; give it with --vs ORIGINAL to profile both\n", why)
		}
	}
	var out []*bench.OpProfile
	for i, l := range all {
		fmt.Fprintf(log, "bench: profiling the ops of %s...\n", l.Spec.Name)
		var p *bench.OpProfile
		var err error
		if plans != nil {
			p, err = benchrun.ProfileCalls(l, plans[i].Method, plans[i], o)
		} else {
			p, err = benchrun.ProfileOps(l, inputs, o)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// originalBeside loads the model an artifact was made from when it is next to the artifact
// and has the digest the manifest records; otherwise it says why not.
func originalBeside(art *benchrun.Loaded, log io.Writer) (*benchrun.Loaded, string) {
	man := art.Model.Manifest
	if man.SourceName == "" {
		return nil, "the artifact does not name its original"
	}
	path := filepath.Join(filepath.Dir(art.Spec.Path), filepath.Base(man.SourceName))
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Sprintf("its original %s is not next to it", man.SourceName)
	}
	if man.SourceSHA256 != "" {
		if h, err := bench.HashFile(path); err != nil || h != man.SourceSHA256 {
			return nil, fmt.Sprintf("%s next to it is not the original it was made from (another SHA-256)", path)
		}
	}
	l, err := benchrun.LoadModel(benchrun.ModelSpec{Path: path, Name: filepath.Base(path)}, log)
	if err != nil {
		return nil, fmt.Sprintf("its original %s does not load: %v", path, err)
	}
	return l, ""
}

// measureMemory records the process's peak resident set and each model's size.
func measureMemory(rep *bench.RunReport, specs []benchrun.ModelSpec) error {
	m := &bench.Memory{PeakRSSBytes: bench.PeakRSS(), Models: map[string]bench.ModelSize{}}
	for _, s := range specs {
		sz, err := bench.MeasureModelSize(s.Path)
		if err != nil {
			return err
		}
		m.Models[s.Name] = sz
	}
	rep.Memory = m
	return nil
}

// measureInterruptions measures, after the timed runs, what the machine takes from as many
// of the run's CPUs as it ran threads, all busy at once (the others left as idle as in the
// runs), and adds the floor that gives each model's tail: long enough for its slowest p50 to
// fit cpu.FloorFits times (up to 5 s), at least --interrupts.
func (b *benchCmd) measureInterruptions(rep *bench.RunReport, log io.Writer) error {
	d := b.intrDur
	for _, r := range rep.LatencyResults() {
		d = cpu.DurationFor(r.Stats.P50, d)
	}
	fmt.Fprintf(log, "bench: measuring interruptions on %d of CPUs %v for %v...\n", rep.Environment.Threads, cpu.CPUSet(rep.Environment.CPUsUsed), d.Round(time.Millisecond))
	in, err := cpu.MeasureInterruptions(cpu.InterruptOptions{CPUs: rep.Environment.CPUsUsed, Count: rep.Environment.Threads, Duration: d}, torch.MeasureGaps)
	if err != nil {
		return err
	}
	rep.Interruptions = in
	rep.AddResultFloors(rep.Environment.Threads)
	return nil
}

// runSweep measures every point of the sweep. A point with another batch or thread count than
// the last gets a freshly loaded copy of the model: libtorch's oneDNN INT8 convolution keeps the
// primitive made for its first call's thread count and input shape, and every later call with
// another count or shape takes a slower path (20 extra reorders per forward on resnet18 INT8,
// from DNNL_VERBOSE) or fails (mobilenet_v2 INT8), so a shared module would favour the first
// point or break the sweep.
func (b *benchCmd) runSweep(l *benchrun.Loaded, ins []benchrun.InputSpec, cfg bench.SweepConfig, o bench.Options, log io.Writer) (*bench.SweepResult, error) {
	n := len(cfg.Batches) * len(cfg.Threads) * len(cfg.Streams)
	i := 0
	cur, last := l, bench.Point{}
	defer func() {
		if cur != l {
			cur.Model.Close()
		}
	}()
	return bench.Sweep(cfg, func(p bench.Point) (*bench.ThroughputResult, error) {
		i++
		if i > 1 && (p.Batch != last.Batch || p.Threads != last.Threads) {
			fresh, err := benchrun.LoadModel(l.Spec, io.Discard) // its warnings were shown at the first load
			if err != nil {
				return nil, err
			}
			if cur != l {
				cur.Model.Close()
			}
			cur = fresh
			fmt.Fprintf(log, "bench: sweep: a fresh copy of %s for batch %d, %d thread(s)\n", l.Spec.Name, p.Batch, p.Threads)
		}
		last = p
		fmt.Fprintf(log, "bench: sweep %d/%d: %s\n", i, n, p)
		return benchrun.RunStreams(cur, ins, p.Batch, p.Threads, p.Streams, o, b.seed)
	})
}

func describeRun(specs []benchrun.ModelSpec, o bench.Options, order bench.Order) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	what := fmt.Sprintf("%d runs", o.Runs)
	if o.Duration > 0 {
		what = o.Duration.String()
	}
	if len(specs) > 1 {
		return fmt.Sprintf("%s in %s rounds, %s", strings.Join(names, " vs "), order, what)
	}
	return fmt.Sprintf("%s, %s", names[0], what)
}

// settings records the run's inputs for the report.
func (b *benchCmd) settings() map[string]string {
	s := map[string]string{
		"input-shape": strings.Join(b.shapes, ","),
		"warmup":      strconv.Itoa(b.warmup),
		"seed":        strconv.FormatUint(b.seed, 10),
	}
	if len(b.dtypes) > 0 {
		s["dtype"] = strings.Join(b.dtypes, ",")
	}
	if b.duration > 0 {
		s["duration"] = b.duration.String()
	} else {
		s["runs"] = strconv.Itoa(b.runs)
	}
	if len(b.models)+len(b.vs) > 1 {
		s["order"] = b.order
	}
	if b.streams > 1 {
		s["streams"] = strconv.Itoa(b.streams)
	}
	return s
}

// captureEnv fills the environment from Go, the machine probe (bench.Environment.AddProbe)
// and libtorch, and returns the number of CPUs the process may keep busy.
func captureEnv() (bench.Environment, int) {
	env := bench.CaptureEnvironment()
	env.TorchspeedVersion = version.Version
	env.LibtorchVersion = torch.Version()
	if e, err := torch.QEngine(); err == nil {
		env.QuantizedEngine = e
	}
	if b, err := torch.BLAS(); err == nil && b.Library != "" {
		env.BLAS = b.Config + ", " + b.Threading // its thread count follows Threads
	}
	avail := runtime.NumCPU()
	if p, err := cpu.Detect(cpu.Options{}); err == nil {
		if n := env.AddProbe(p); n > 0 {
			avail = n
		}
	}
	return env, avail
}

// write prints the report (table or JSON) and writes the files asked for.
func (b *benchCmd) write(stdout, log io.Writer, rep *bench.RunReport, o outputs) error {
	var errs []error
	if o.jsonPath != "" {
		if err := bench.WriteFileAtomic(o.jsonPath, rep.WriteJSON); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintln(log, "wrote", o.jsonPath)
		}
	}
	if o.csvPath != "" && o.csvPath != "-" {
		if err := bench.WriteFileAtomic(o.csvPath, rep.WriteCSV); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintln(log, "wrote", o.csvPath)
		}
	}
	if o.opsCSV != "" && len(rep.Profiles) > 0 {
		if err := bench.WriteFileAtomic(o.opsCSV, rep.WriteOpsCSV); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintln(log, "wrote", o.opsCSV)
		}
	}
	if o.benchfmt != "" {
		if err := bench.WriteFileAtomic(o.benchfmt, rep.WriteBenchfmt); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintln(log, "wrote", o.benchfmt)
		}
	}
	for _, dir := range o.plotDirs {
		paths, err := writePlots(rep, dir)
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range paths {
			fmt.Fprintln(log, "wrote", p)
		}
	}
	var err error
	switch {
	case b.asJSON:
		err = rep.WriteJSON(stdout)
	case o.csvPath == "-":
		err = rep.WriteCSV(stdout)
	default:
		err = rep.WriteTable(stdout)
	}
	return errors.Join(append([]error{err}, errs...)...)
}

// writePlots draws the latency distributions (per model, or per stream in throughput mode)
// and the sweep curve into dir.
func writePlots(rep *bench.RunReport, dir string) ([]string, error) {
	var all []string
	title := "latency, " + plot.Count(rep.Environment.Threads, "thread")
	if rs := rep.LatencyResults(); len(rs) > 0 {
		p, err := plot.Latency(plot.SeriesFromResults(rs), title, dir, "bench_latency")
		if err != nil {
			return all, err
		}
		all = append(all, p...)
	}
	if t := rep.Throughput; t != nil {
		// --instances runs its streams as processes: name them so.
		unit := "stream"
		if rep.Settings["instances"] != "" {
			unit = "instance"
		}
		title := fmt.Sprintf("%s: %s x %s", t.Name, plot.Count(t.Streams, unit), plot.Count(t.Threads, "thread"))
		p, err := plot.Latency(plot.SeriesFromThroughput(t, unit), title, dir, "bench_latency")
		if err != nil {
			return all, err
		}
		all = append(all, p...)
	}
	if s := rep.Sweep; s != nil {
		p, err := plot.Sweep(s, "sweep: median latency vs throughput", dir, "bench_sweep")
		if err != nil {
			return all, err
		}
		all = append(all, p...)
	}
	return all, nil
}
