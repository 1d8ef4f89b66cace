package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/benchrun"
	"github.com/torchspeed/torchspeed/pkg/callargs"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// checkCmd re-validates an artifact on the CPU at hand: the one a fleet deploys it to, which
// need not be the one optimize measured it on.
type checkCmd struct {
	ui        *ui
	artifact  string
	original  string
	args      callInputs
	calls     int
	minCosine float64
	out       string
	asJSON    bool
	noTiming  bool
	opLibs    []string
}

// checkReport is what check writes beside the artifact (ARTIFACT.check.json) and prints.
type checkReport struct {
	Artifact   string          `json:"artifact"`
	Created    time.Time       `json:"created"`
	MeasuredOn *torchspeed.CPU `json:"measured_on"`
	Here       *torchspeed.CPU `json:"here"`
	// Missing and Extra are the kernel features the artifact's CPU has and this one lacks, and
	// the other way round.
	Missing []string `json:"missing_here"`
	Extra   []string `json:"extra_here"`
	// RuntimeCandidate is the manifest's runtime setting; RuntimeLeftOut says what of it this
	// CPU cannot run (left out by run, bench, launch and export here).
	RuntimeCandidate string   `json:"runtime_candidate"`
	RuntimeLeftOut   []string `json:"runtime_left_out"`
	// Runtime is the candidate (what this CPU can run of it) timed against libtorch's defaults
	// here, as optimize decided it; null when there is nothing to time or --no-timing.
	Runtime *bench.RuntimeVerdict `json:"runtime"`
	// RuntimeStillWins says the candidate beats the defaults here too; RuntimeWhy says why not.
	RuntimeStillWins *bool  `json:"runtime_still_wins"`
	RuntimeWhy       string `json:"runtime_why,omitempty"`
	// INT8SaturationRisk: an 8-bit-activation INT8 artifact validated with exact INT8
	// arithmetic meets a CPU whose oneDNN kernels saturate (see Manifest.INT8SaturationRisk).
	INT8SaturationRisk bool           `json:"int8_saturation_risk"`
	Accuracy           *checkAccuracy `json:"accuracy"`
	Threads            *checkThreads  `json:"threads"`
	// Verdict is "ok", "accuracy-failed" or "accuracy-not-checked".
	Verdict  string   `json:"verdict"`
	Warnings []string `json:"warnings"`
}

type checkAccuracy struct {
	Original string        `json:"original"`
	Calls    int           `json:"calls"`
	Inputs   string        `json:"inputs"`
	Outputs  []checkOutput `json:"outputs"`
	// Cosine is the lowest of the outputs'; MinCosine the threshold it must meet;
	// ValidatedCosine the figure optimize measured where it made the artifact (null: none).
	Cosine          float64  `json:"cosine"`
	MaxAbsError     float64  `json:"max_abs_error"`
	MinCosine       float64  `json:"min_cosine"`
	ValidatedCosine *float64 `json:"validated_cosine"`
	Pass            bool     `json:"pass"`
	// Decisive: the verdict counts (real inputs, or an FP32 artifact); false for an INT8
	// artifact on random inputs.
	Decisive bool `json:"decisive"`
}

type checkOutput struct {
	Name        string  `json:"name"`
	Cosine      float64 `json:"cosine"`
	MaxAbsError float64 `json:"max_abs_error"`
}

// checkThreads is the artifact's median latency at each thread count worth trying here,
// measured in shuffled rounds on one OS thread.
type checkThreads struct {
	Manifest int             `json:"manifest"`
	Best     int             `json:"best"`
	P50Ms    map[int]float64 `json:"p50_ms"`
	Rounds   int             `json:"rounds"`
	Calls    int             `json:"calls_per_round"`
}

func newCheckCmd(u *ui) *cobra.Command {
	k := &checkCmd{ui: u}
	c := &cobra.Command{
		Use:   "check -m ARTIFACT [--original MODEL.pt] [--input [NAME=]VALUE]...",
		Short: "Re-validate an artifact on this CPU: accuracy, runtime settings, threads",
		Long: `check answers, on the machine at hand, the questions an artifact made on another CPU leaves
open (a fleet deploys one artifact to many kinds of server):

  - which kernel features differ from the CPU optimize measured it on (the manifest records it);
  - which of its runtime settings this CPU cannot run (ATen's AVX-512 kernels, OpenBLAS's forced
    cores, huge pages): run, bench, launch and export leave them out here;
  - whether its INT8 arithmetic changes here (8-bit activations meet oneDNN kernels without VNNI,
    which saturate);
  - its accuracy: the artifact and the original model (--original, else the file the manifest
    names, beside the artifact, if its SHA-256 matches) on the same inputs (--input, -c, else
    the manifest's shapes with random values, which judge an FP32 artifact but not an INT8
    one: its ranges come from its calibration data), compared output by output;
  - its latency at each thread count worth trying here, against the manifest's count, and its
    runtime setting (what this CPU can run of it) against libtorch's defaults, in processes of
    their own as optimize times them.

The result is printed and written to ARTIFACT.check.json (--out to choose; it is replaced). Exit
0 when the accuracy holds (or could not be checked: no original), 3 when it does not, 2 for bad
input. A full re-measurement of passes and runtime settings is optimize's job.`,
		Example: `  torchspeed check -m out/resnet18.torchspeed.pt
  torchspeed check -m vad.torchspeed.pt --original silero_vad.jit \
      --input x=seq:chunks.npy --input sr=int:16000`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return k.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&k.artifact, "model", "m", "", "the artifact (.torchspeed.pt) to check")
	f.StringVar(&k.original, "original", "", "the model the artifact was made from (default: the manifest's source_name beside the artifact)")
	k.args.addFlags(c)
	f.IntVar(&k.calls, "calls", 0, "calls to compare (default: a sequence's length, else 8)")
	f.Float64Var(&k.minCosine, "min-cosine", 0, "lowest acceptable cosine of any output (default: the lower of 0.99 and what optimize validated minus 0.005)")
	f.StringVar(&k.out, "out", "", "where to write the result (default: ARTIFACT.check.json beside it)")
	f.BoolVar(&k.asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&k.noTiming, "no-timing", false, "skip the thread-count and runtime timing")
	f.StringArrayVar(&k.opLibs, "op-library", nil, "shared library of custom operators the model calls, loaded before it (repeat)")
	return c
}

func (k *checkCmd) run(c *cobra.Command) error {
	if k.artifact == "" {
		return exitcode.Usagef("check: --model is required: the artifact to check")
	}
	if st, err := os.Stat(k.artifact); err != nil {
		return exitcode.Usagef("check: artifact %q: %v", k.artifact, err)
	} else if st.IsDir() {
		return exitcode.Usagef("check: artifact %q is a directory: give the .torchspeed.pt file optimize wrote", k.artifact)
	}
	if k.calls < 0 || k.calls > 100000 {
		return exitcode.Usagef("check: --calls %d: give 1 to 100000", k.calls)
	}
	if k.minCosine < 0 || k.minCosine > 1 {
		return exitcode.Usagef("check: --min-cosine %g: give a value in [0, 1]", k.minCosine)
	}
	man, err := torchspeed.VerifyArchive(k.artifact)
	if err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("check: %w", err))
	}
	if err := torchspeed.LoadOpLibraries(k.opLibs); err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("check: --op-library: %w", err))
	}
	if man == nil {
		return exitcode.Usagef("check: %q has no torchspeed manifest: check compares an artifact made by torchspeed optimize with its original", k.artifact)
	}
	out := k.out
	if out == "" {
		out = k.artifact + ".check.json"
	}
	if err := checkDistinct(out, k.artifact, k.original); err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("check: --out: %w", err))
	}
	if err := safefile.CheckWritableDir(filepath.Dir(out)); err != nil {
		return exitcode.Usagef("check: --out: %v", err)
	}
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return fmt.Errorf("check: read this CPU: %w", err)
	}
	log := k.ui.logOrDiscard(c.ErrOrStderr())
	rep := &checkReport{Artifact: k.artifact, Created: time.Now().UTC(), MeasuredOn: man.CPU, Here: torchspeed.CPUOf(probe),
		RuntimeCandidate: man.Runtime.Candidate, Missing: []string{}, Extra: []string{}, RuntimeLeftOut: []string{}, Warnings: []string{}}
	if man.CPU == nil {
		rep.Warnings = append(rep.Warnings, "the manifest does not record the CPU the artifact was measured on (made by an older torchspeed)")
	}
	if m, e := torchspeed.FeatureDiff(man.CPU, rep.Here); m != nil || e != nil {
		rep.Missing, rep.Extra = append(rep.Missing, m...), append(rep.Extra, e...)
	}
	rt := man.Runtime
	cand := rt.Setting()
	fit, notes := cand.Fit(runenv.MachineOf(probe), man.CPU.Name())
	if len(notes) > 0 {
		rep.RuntimeLeftOut = notes
	}
	rep.INT8SaturationRisk = man.INT8SaturationRisk(rep.Here)

	if err := k.accuracy(rep, man, log); err != nil {
		return err
	}
	if !k.noTiming {
		if err := k.timeThreads(rep, man, log); err != nil {
			return err
		}
		if err := k.timeRuntime(c, rep, man, fit, log); err != nil {
			return err
		}
	}
	switch {
	case rep.Accuracy == nil || !rep.Accuracy.Decisive:
		rep.Verdict = "accuracy-not-checked"
	case rep.Accuracy.Pass:
		rep.Verdict = "ok"
	default:
		rep.Verdict = "accuracy-failed"
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := safefile.WriteFile(out, append(b, '\n')); err != nil {
		return fmt.Errorf("check: write %s: %w", out, err)
	}
	fmt.Fprintf(log, "check: wrote %s\n", out)
	if k.asJSON {
		fmt.Fprintln(c.OutOrStdout(), string(b))
	} else {
		printCheck(c.OutOrStdout(), rep)
	}
	if rep.Verdict == "accuracy-failed" {
		return exitcode.New(exitcode.Validation, fmt.Errorf("check: %s: cosine %.5f against the original here, below %.4g: re-optimize on this kind of CPU (or with quantize.reduce_range: true for INT8)",
			k.artifact, rep.Accuracy.Cosine, rep.Accuracy.MinCosine))
	}
	return nil
}

// checkDistinct refuses an output path that names one of the inputs.
func checkDistinct(out string, inputs ...string) error {
	so, err := os.Stat(out)
	if err != nil {
		return nil // not there yet: cannot be an input
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		if si, err := os.Stat(in); err == nil && os.SameFile(so, si) {
			return fmt.Errorf("%q is the input %q: give another file", out, in)
		}
	}
	return nil
}

// findOriginal is --original, else the manifest's source beside the artifact when its SHA-256 is
// the one the manifest records; "" with a reason when there is none.
func (k *checkCmd) findOriginal(man *torchspeed.Manifest) (string, string, error) {
	path := k.original
	if path == "" {
		if man.SourceName == "" || strings.ContainsAny(man.SourceName, "/\\") {
			return "", "the manifest names no original: give it with --original", nil
		}
		path = filepath.Join(filepath.Dir(k.artifact), man.SourceName)
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Sprintf("the original %s is not beside the artifact: give it with --original", man.SourceName), nil
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", "", exitcode.Usagef("check: --original %q: %v", path, err)
	}
	if st.IsDir() {
		return "", "", exitcode.Usagef("check: --original %q is a directory: give the TorchScript file the artifact was made from", path)
	}
	sum, _, err := safefile.SHA256(path)
	if err != nil {
		return "", "", exitcode.Usagef("check: --original %q: %v", path, err)
	}
	if man.SourceSHA256 != "" && sum != man.SourceSHA256 {
		if k.original != "" {
			return "", "", exitcode.Usagef("check: --original %q is not the model the artifact was made from (SHA-256 %s, the manifest records %s)", path, sum, man.SourceSHA256)
		}
		return "", fmt.Sprintf("%s beside the artifact is not the model it was made from (SHA-256 differs): give the original with --original", path), nil
	}
	return path, "", nil
}

// accuracy runs the artifact and the original on the same inputs and compares their outputs.
func (k *checkCmd) accuracy(rep *checkReport, man *torchspeed.Manifest, log io.Writer) error {
	orig, why, err := k.findOriginal(man)
	if err != nil {
		return err
	}
	if orig == "" {
		rep.Warnings = append(rep.Warnings, "accuracy not checked: "+why)
		return nil
	}
	art, err := torchspeed.Load(k.artifact, torchspeed.LoadOptions{KeepThreads: true, Method: k.args.method})
	if errors.Is(err, torchspeed.ErrNoMethod) {
		return exitcode.New(exitcode.Usage, fmt.Errorf("check: --method: %w", err))
	} else if err != nil {
		return err
	}
	defer art.Close()
	rep.Warnings = append(rep.Warnings, art.Warnings...)
	ref, err := torchspeed.Load(orig, torchspeed.LoadOptions{KeepThreads: true, Method: art.Method(), ResetMethod: man.ResetMethod})
	if err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("check: original %q: %w", orig, err))
	}
	defer ref.Close()
	plan, err := k.args.plan("check", art, log)
	if err != nil {
		return err
	}
	defer plan.Close()
	calls := k.calls
	switch {
	case calls == 0 && plan.Calls() > 0:
		calls = plan.Calls()
	case calls == 0:
		calls = 8
	}
	inputs := "the manifest's shapes, random values"
	if len(k.args.inputs) > 0 || len(k.args.config) > 0 || len(k.args.shapes) > 0 {
		inputs = "given"
	}
	diffs, names, err := compareCalls(ref, art, plan, calls)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	acc := &checkAccuracy{Original: orig, Calls: calls, Inputs: inputs, Cosine: 1}
	for i, d := range diffs {
		acc.Outputs = append(acc.Outputs, checkOutput{Name: names[i], Cosine: d.Cosine(), MaxAbsError: d.MaxAbs()})
		acc.Cosine = min(acc.Cosine, d.Cosine())
		acc.MaxAbsError = max(acc.MaxAbsError, d.MaxAbs())
	}
	acc.MinCosine = validate.DefaultThresholds().MinCosine
	if v, ok := man.Validation["cosine"]; ok {
		acc.ValidatedCosine = &v
		acc.MinCosine = min(acc.MinCosine, v-0.005)
	}
	if k.minCosine > 0 {
		acc.MinCosine = k.minCosine
	}
	acc.Pass = acc.Cosine >= acc.MinCosine
	rep.Accuracy = acc
	if inputs != "given" && strings.HasPrefix(man.Precision, "int8") {
		// An INT8 model's ranges were calibrated on real data: random values outside them
		// clip, and say nothing about the model's accuracy on what it serves.
		acc.Decisive = false
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("accuracy on random inputs only (cosine %.5f): an INT8 model's ranges come from its calibration data; give real inputs with --input for a verdict", acc.Cosine))
		return nil
	}
	acc.Decisive = true
	return nil
}

// compareCalls makes calls calls of the plan on a session of each model and compares their
// float outputs, output by output.
func compareCalls(ref, art *torchspeed.Model, plan *callargs.Plan, calls int) ([]validate.Diff, []string, error) {
	rs, err := ref.NewSession()
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	as, err := art.NewSession()
	if err != nil {
		return nil, nil, err
	}
	defer as.Close()
	var diffs []validate.Diff
	var names []string
	for i := 0; i < calls; i++ {
		want, err := callFloats(rs, plan, i)
		if err != nil {
			return nil, nil, fmt.Errorf("original, call %d: %w", i+1, err)
		}
		got, err := callFloats(as, plan, i)
		if err != nil {
			return nil, nil, fmt.Errorf("artifact, call %d: %w", i+1, err)
		}
		if len(got) != len(want) {
			return nil, nil, fmt.Errorf("call %d: the artifact gave %d float outputs, the original %d", i+1, len(got), len(want))
		}
		if diffs == nil {
			diffs = make([]validate.Diff, len(want))
			for _, w := range want {
				names = append(names, w.name)
			}
		}
		for j := range want {
			if len(want[j].v) != len(got[j].v) {
				return nil, nil, fmt.Errorf("call %d: output %s has %d values, the original's %d", i+1, want[j].name, len(got[j].v), len(want[j].v))
			}
			diffs[j].Merge(validate.DiffOf(want[j].v, got[j].v))
		}
	}
	return diffs, names, nil
}

type namedFloats struct {
	name string
	v    []float32
}

// callFloats runs call i of the plan and returns its floating-point outputs.
func callFloats(s *torchspeed.Session, plan *callargs.Plan, i int) ([]namedFloats, error) {
	v, err := s.RunMethod(plan.Method, plan.Args(i)...)
	if err != nil {
		return nil, err
	}
	outs, err := v.Outputs()
	v.Close()
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	var res []namedFloats
	for _, o := range outs {
		switch o.Tensor.DType() {
		case torch.Float32, torch.Float64, torch.Float16, torch.BFloat16:
		default:
			continue // integer outputs (class indices, lengths) have no cosine
		}
		f, err := o.Tensor.Float32s()
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		res = append(res, namedFloats{o.Name, f})
	}
	return res, nil
}

// timeThreads times the artifact at each thread count worth trying here, in shuffled rounds on
// one locked OS thread (libtorch's OpenMP pool belongs to the calling thread).
func (k *checkCmd) timeThreads(rep *checkReport, man *torchspeed.Manifest, log io.Writer) error {
	m, err := torchspeed.Load(k.artifact, torchspeed.LoadOptions{KeepThreads: true, Method: k.args.method})
	if err != nil {
		return err
	}
	defer m.Close()
	plan, err := k.args.plan("check", m, io.Discard)
	if err != nil {
		return err
	}
	defer plan.Close()
	counts := bench.ThreadCandidates(torch.AvailableCPUs())
	if t := man.Runtime.Threads; t > 0 && t <= torch.AvailableCPUs() && !slices.Contains(counts, t) {
		counts = append(counts, t)
	}
	const rounds, perRound = 5, 20
	samples := map[int][]float64{}
	fmt.Fprintf(log, "check: timing %d thread count(s), %d rounds of %d calls\n", len(counts), rounds, perRound)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s, err := m.NewSession(torchspeed.SessionOptions{CallerThread: true})
		if err != nil {
			errc <- err
			return
		}
		defer s.Close()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		order := slices.Clone(counts)
		for r := 0; r < rounds; r++ {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, n := range order {
				if err := torch.SetNumThreadsOnThisThread(n); err != nil {
					errc <- err
					return
				}
				for i := -2; i < perRound; i++ { // two warm-up calls after each switch
					start := time.Now()
					v, err := s.RunMethod(plan.Method, plan.Args(i+2)...)
					if err != nil {
						errc <- err
						return
					}
					v.Close()
					if i >= 0 {
						samples[n] = append(samples[n], float64(time.Since(start).Microseconds())/1000)
					}
				}
			}
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("check: timing: %w", err)
	}
	th := &checkThreads{Manifest: man.Runtime.Threads, P50Ms: map[int]float64{}, Rounds: rounds, Calls: perRound}
	for _, n := range counts {
		s := samples[n]
		slices.Sort(s)
		th.P50Ms[n] = bench.Percentile(s, 0.5)
		if th.Best == 0 || th.P50Ms[n] < th.P50Ms[th.Best] {
			th.Best = n
		}
	}
	rep.Threads = th
	return nil
}

// timeRuntime times the artifact's runtime candidate (what this CPU can run of it) against
// libtorch's defaults, as optimize did: wait policies and preloaded allocators take effect only
// when a process starts, so each serves the artifact in processes of its own, two per setting
// plus a second group with the defaults (the control), taking turns in shuffled rounds.
func (k *checkCmd) timeRuntime(c *cobra.Command, rep *checkReport, man *torchspeed.Manifest, cand runenv.Candidate, log io.Writer) error {
	if cand.Name == "" || cand.Name == runenv.DefaultCandidate || len(cand.Kinds()) == 0 {
		return nil // libtorch's defaults, or nothing left this CPU can run
	}
	cand, err := cand.Resolve(nil)
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("runtime candidate %s not timed: %v", cand.Name, err))
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("check: find own executable: %w", err)
	}
	openmp := man.Runtime.OpenMP
	if openmp == "" {
		openmp = "gnu"
	}
	base := runenv.ScrubEnv(os.Environ())
	candEnv, err := cand.Environ(openmp, base)
	if err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("check: manifest runtime: %w", err))
	}
	threads := max(1, min(man.Runtime.Threads, torch.AvailableCPUs()))
	const procs, rounds, warmup, runs = 2, 6, 5, 10
	groups := []struct {
		name string
		env  []string
	}{{runenv.DefaultCandidate, base}, {cand.Name, candEnv}, {"default (second group)", base}}
	argv := []string{exe, "bench", "--serve", "-m", k.artifact, "--runtime", "default", "--threads", fmt.Sprint(threads), "--warmup", "10"}
	for _, lib := range k.opLibs {
		argv = append(argv, "--op-library", lib)
	}
	var specs []benchrun.ServerSpec
	for _, g := range groups {
		for p := range procs {
			specs = append(specs, benchrun.ServerSpec{Name: fmt.Sprintf("runtime %s (process %d)", g.name, p+1), Env: g.env, Argv: argv})
		}
	}
	fmt.Fprintf(log, "check: timing runtime candidate %s against libtorch's defaults (%d processes, %d rounds)\n", cand.Name, len(specs), rounds)
	srv, err := benchrun.StartServers(c.Context(), specs, nil)
	if err != nil {
		return fmt.Errorf("check: runtime: %w", err)
	}
	defer srv.Close()
	lat, err := benchrun.MeasureRounds(c.Context(), srv, benchrun.RoundsOptions{Rounds: rounds, Warmup: warmup, Runs: runs, Seed: 1})
	if err != nil {
		return fmt.Errorf("check: runtime: %w", err)
	}
	if err := srv.Close(); err != nil {
		return fmt.Errorf("check: runtime: %w", err)
	}
	res := make([]*bench.ProcessResult, len(groups))
	for g := range groups {
		res[g] = &bench.ProcessResult{Name: groups[g].name, Blocks: make([][][]time.Duration, procs)}
		for p := range procs {
			if res[g].Blocks[p], err = bench.SplitRounds(lat[g*procs+p], runs); err != nil {
				return fmt.Errorf("check: runtime: %w", err)
			}
		}
	}
	ch, err := bench.ChooseRuntime(res[0], res[2], res[1:2], 1, 1)
	if err != nil {
		return fmt.Errorf("check: runtime: %w", err)
	}
	v := ch.Verdicts[1]
	wins := ch.Chosen == cand.Name
	rep.Runtime, rep.RuntimeStillWins = &v, &wins
	if !wins {
		rep.RuntimeWhy = ch.Why
		if rep.RuntimeWhy == "" {
			rep.RuntimeWhy = fmt.Sprintf("not faster beyond doubt: its 95%% interval %.3f-%.3f does not lie below 1", v.RatioLo, v.RatioHi)
		}
	}
	return nil
}

func printCheck(w io.Writer, r *checkReport) {
	fmt.Fprintf(w, "%s\n", r.Artifact)
	if r.MeasuredOn != nil {
		fmt.Fprintf(w, "  measured on  %s (%s)\n", r.MeasuredOn.Name(), strings.Join(r.MeasuredOn.Features, " "))
	} else {
		fmt.Fprintln(w, "  measured on  not recorded")
	}
	fmt.Fprintf(w, "  this CPU     %s (%s)\n", r.Here.Name(), strings.Join(r.Here.Features, " "))
	switch {
	case len(r.Missing) == 0 && len(r.Extra) == 0 && r.MeasuredOn != nil:
		fmt.Fprintln(w, "  features     the same kernel features")
	case r.MeasuredOn != nil:
		fmt.Fprintf(w, "  features     missing here: %s; extra here: %s\n", orNone(r.Missing), orNone(r.Extra))
	}
	fmt.Fprintf(w, "  runtime      %s", orDash(r.RuntimeCandidate))
	if len(r.RuntimeLeftOut) == 0 {
		fmt.Fprintln(w, ": runs here as measured")
	} else {
		fmt.Fprintln(w)
		for _, n := range r.RuntimeLeftOut {
			fmt.Fprintf(w, "               %s\n", n)
		}
	}
	if v := r.Runtime; v != nil {
		verdict := "still beats libtorch's defaults here"
		if !*r.RuntimeStillWins {
			verdict = "does not beat libtorch's defaults here (" + r.RuntimeWhy + "): bench --runtime default, or re-optimize here"
		}
		fmt.Fprintf(w, "               %.3fx the defaults' latency [%.3f, %.3f]: %s\n", v.Ratio, v.RatioLo, v.RatioHi, verdict)
	}
	if r.INT8SaturationRisk {
		fmt.Fprintln(w, "  INT8         8-bit activations validated with exact INT8 arithmetic; this CPU's oneDNN kernels saturate them")
	}
	if a := r.Accuracy; a != nil {
		verdict := "holds"
		switch {
		case !a.Decisive:
			verdict = "not judged (random inputs on an INT8 model)"
		case !a.Pass:
			verdict = "FAILS"
		}
		validated := "not recorded"
		if a.ValidatedCosine != nil {
			validated = fmt.Sprintf("%.5f", *a.ValidatedCosine)
		}
		fmt.Fprintf(w, "  accuracy     %s: cosine %.5f (threshold %.4g; validated %s where it was made), max abs error %.4g, %d call(s) on %s, against %s\n",
			verdict, a.Cosine, a.MinCosine, validated, a.MaxAbsError, a.Calls, a.Inputs, a.Original)
	}
	if t := r.Threads; t != nil {
		var parts []string
		for _, n := range slices.Sorted(maps.Keys(t.P50Ms)) {
			parts = append(parts, fmt.Sprintf("%d: %.3f ms", n, t.P50Ms[n]))
		}
		fmt.Fprintf(w, "  threads      p50 %s; fastest here %d, the manifest's %d\n", strings.Join(parts, ", "), t.Best, t.Manifest)
	}
	for _, s := range r.Warnings {
		fmt.Fprintf(w, "  warning      %s\n", s)
	}
	fmt.Fprintf(w, "  verdict      %s\n", r.Verdict)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
