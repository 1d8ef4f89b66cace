package export

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// CostOptions say how long to measure.
type CostOptions struct {
	// Runs is the number of interleaved rounds (each loader runs once per round); 0 means 100.
	Runs int
	// Warmup rounds before timing; 0 means 10.
	Warmup int
	// Duration times interleaved rounds for this long instead of Runs of them.
	Duration time.Duration
	// Server names the server in the sentence ("Triton", "TorchServe").
	Server string
	// Params also times the plainly loaded model under each of Triton's executor settings
	// (TritonSettings), in the same interleaved rounds, and chooses its parameters.
	Params bool
}

// Cost compares the artifact as stock servers run it (plain torch::jit::load, contiguous
// inputs, no load-time passes, the exported thread count) with torchspeed.Load, timed
// interleaved in one process.
type Cost struct {
	Server string `json:"server"`
	// PlainP50Ms and TorchspeedP50Ms are medians in milliseconds; P95 likewise.
	PlainP50Ms      float64 `json:"plain_p50_ms"`
	PlainP95Ms      float64 `json:"plain_p95_ms"`
	TorchspeedP50Ms float64 `json:"torchspeed_p50_ms"`
	TorchspeedP95Ms float64 `json:"torchspeed_p95_ms"`
	// Ratio is plain p50 over torchspeed p50 (above 1: plain loading is slower), with its 95%
	// bootstrap interval.
	Ratio       float64 `json:"ratio"`
	RatioLo     float64 `json:"ratio_ci_lo"`
	RatioHi     float64 `json:"ratio_ci_hi"`
	Significant bool    `json:"significant"`
	Verdict     string  `json:"verdict"`
	Rounds      int     `json:"rounds"`
	Threads     int     `json:"threads"`
	// Lost lists what torchspeed.Load does that a plain load does not.
	Lost []string `json:"lost"`
	// OpLibrary: the served graph calls torchspeed's operators, and the plain load was timed
	// with them registered, as a server that loads torch.OpsLibraryName runs it.
	OpLibrary bool   `json:"op_library"`
	Sentence  string `json:"sentence"`
	// Params is the measured choice of Triton's executor parameters (CostOptions.Params).
	Params *ParamChoice `json:"triton_params,omitempty"`
}

// MeasureCost times served (the file the server loads: the artifact, or its graph saved after
// the load-time passes listed in saved) loaded plainly against a's artifact loaded with
// torchspeed.Load, interleaved in shuffled rounds, at the manifest's thread count; with
// o.Params, also under each of Triton's executor settings. A served graph that calls
// torchspeed's operators runs them as registered in this process by libtorchspeed.so, the
// same kernels torch.OpsLibraryName registers in a server.
func MeasureCost(a *Artifact, served string, saved []string, o CostOptions) (*Cost, error) {
	if o.Runs <= 0 && o.Duration <= 0 {
		o.Runs = 100
	}
	if o.Duration > 0 {
		o.Runs = 0
	}
	if o.Warmup <= 0 {
		o.Warmup = 10
	}
	if o.Server == "" {
		o.Server = "A stock libtorch server"
	}
	threads := a.Manifest.Runtime.Threads
	if threads > 0 {
		if err := torch.SetNumThreads(threads); err != nil {
			return nil, err
		}
	}
	var ins []*torch.Tensor
	defer func() {
		for _, t := range ins {
			t.Close()
		}
	}()
	for i, s := range a.Inputs {
		t, err := sampleTensor(s, 1, uint64(i))
		if err != nil {
			return nil, err
		}
		ins = append(ins, t)
	}
	// The plain modules are loaded first, before torchspeed.Load sets the quantized engine: a
	// server process does not set it either.
	plain, err := torch.Load(served)
	if err != nil {
		return nil, fmt.Errorf("plain load of %q: %w", served, err)
	}
	defer plain.Close()
	if err := plain.Eval(); err != nil {
		return nil, err
	}
	// Triton's executor settings (o.Params) are applied before each call, on the shared
	// inference thread through a Go hand-off (ForwardWith), which costs tens of microseconds on
	// a busy machine that neither a server nor torchspeed.Load pays: the cost line compares the
	// plain module called as torchspeed.Load's is (one C call), with libtorch's default settings.
	var settings []TritonSetting
	var params []bench.Target
	if o.Params {
		settings = TritonSettings()
		var closeParams func()
		if params, closeParams, err = settingTargets(served, settings, ins); err != nil {
			return nil, err
		}
		defer closeParams()
	}
	tsm, err := torchspeed.Load(a.Path, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		return nil, err
	}
	defer tsm.Close()
	targets := append([]bench.Target{
		&loaderTarget{name: "torchspeed.Load", run: func() ([]torch.Output, error) { return tsm.Predict(ins...) }},
		&loaderTarget{name: "plain torch::jit::load", run: func() ([]torch.Output, error) { return plain.Forward(ins...) }},
	}, params...)
	cmp, err := bench.Compare(targets, bench.CompareOptions{
		Options: bench.Options{Runs: o.Runs, Duration: o.Duration, Warmup: o.Warmup}, Order: bench.Shuffled, Seed: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("timing %q both ways: %w", a.Path, err)
	}
	ts, pl := cmp.Results[0].Stats, cmp.Results[1].Stats
	pair := cmp.Pairs[0]
	c := &Cost{
		Server:     o.Server,
		PlainP50Ms: ms(pl.P50), PlainP95Ms: ms(pl.P95), TorchspeedP50Ms: ms(ts.P50), TorchspeedP95Ms: ms(ts.P95),
		Ratio: pair.Ratio, RatioLo: pair.RatioLo, RatioHi: pair.RatioHi, Significant: pair.Significant,
		Verdict: pair.Verdict, Rounds: cmp.Rounds, Threads: torch.NumThreads(), Lost: lostAtPlainLoad(a.Manifest, saved),
		OpLibrary: usesOpLibrary(saved),
	}
	if o.Params {
		if c.Params, err = chooseParams(settings, cmp.Results[2:]); err != nil {
			return nil, err
		}
	}
	c.Sentence = c.sentence()
	return c, nil
}

// lostAtPlainLoad is what torchspeed.Load does for m that a plain torch::jit::load of a file
// holding the graph after the passes in saved does not.
func lostAtPlainLoad(m *torchspeed.Manifest, saved []string) []string {
	lost := []string{}
	has := func(pass string) bool { return slices.Contains(m.LoadPasses, pass) && !slices.Contains(saved, pass) }
	if has(torchspeed.PassOptimizeForInference) {
		lost = append(lost, fmt.Sprintf("optimize_for_inference cannot be saved by libtorch %s", majorMinor(torch.Version())))
	}
	if slices.Contains(m.LoadPasses, torchspeed.PassFreeze) {
		lost = append(lost, "serialization unfolds the frozen graph's constant lists and only a re-freeze at load folds them again")
	}
	if has(torchspeed.PassFastQDQ) {
		lost = append(lost, "the server runs libtorch's own quantize_per_tensor and dequantize (and, with libtorch 1.13, quantized add), not torchspeed's vectorized ones")
	}
	if has(torchspeed.PassFuseConvAdd) {
		lost = append(lost, "the server runs each quantized conv and the add after it as two ops, not torchspeed's fused convolution")
	}
	if has(torchspeed.PassFastLinear) {
		lost = append(lost, "the server runs libtorch's own linears (its BLAS), not torchspeed's GEMM over packed weights")
	}
	if has(torchspeed.PassLinearBF16) {
		lost = append(lost, "the server's linears run in FP32, not in BF16 as validated (outputs closer to the original's)")
	}
	if has(torchspeed.PassFastConv) {
		lost = append(lost, "the server runs libtorch's own convolutions, not torchspeed's im2col + GEMM over packed weights")
	}
	if m.ChannelsLast && !slices.Contains(saved, SavedChannelsLast) {
		lost = append(lost, "the server passes contiguous inputs, not the channels-last ones the artifact was measured with")
	}
	return lost
}

// usesOpLibrary says whether a served graph holding the passes in saved calls torchspeed's
// operators: those of opPasses, and the oneDNN constants of an optimize_for_inference graph saved
// where libtorch's own do not load back (1.13).
func usesOpLibrary(saved []string) bool {
	if slices.ContainsFunc(saved, func(p string) bool { return slices.Contains(opPasses, p) }) {
		return true
	}
	return slices.Contains(saved, torchspeed.PassOptimizeForInference) && torch.MKLDNNServeUnavailable() == ""
}

func (c *Cost) sentence() string {
	why := "nothing torchspeed applies at load time is lost"
	if len(c.Lost) > 0 {
		why = strings.Join(c.Lost, "; ")
	}
	diff := "no significant difference"
	if c.Significant {
		diff = fmt.Sprintf("plain loading takes %.2fx the time (95%% CI %.2f-%.2f)", c.Ratio, c.RatioLo, c.RatioHi)
	}
	if c.OpLibrary {
		diff = "with " + torch.OpsLibraryName + " loaded, " + diff
	}
	s := fmt.Sprintf("%s will run this model at p50 %.3f ms vs %.3f ms with torchspeed's loader (%s, %d intra-op thread(s), %d interleaved rounds): %s",
		c.Server, c.PlainP50Ms, c.TorchspeedP50Ms, diff, c.Threads, c.Rounds, why)
	if p := c.Params; p != nil && p.Chosen != DefaultTritonSetting {
		s += fmt.Sprintf("; with the chosen backend parameters (%s) p50 %.3f ms", p.Chosen, p.byName(p.Chosen).P50Ms)
	}
	return s
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// loaderTarget is one way of running the artifact, for bench.Compare.
type loaderTarget struct {
	name string
	run  func() ([]torch.Output, error)
}

func (t *loaderTarget) Name() string { return t.name }

func (t *loaderTarget) Run() error {
	outs, err := t.run()
	torch.CloseOutputs(outs)
	return err
}
