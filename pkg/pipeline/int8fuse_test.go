package pipeline

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// With optimize.fuse_conv_add on, resnet18's static INT8 model gets an "INT8 static + fast_qdq
// + fuse_conv_add" row: validated against FP32, timed in the INT8 measurement and kept. The
// artifact on disk is the INT8 model with ATen's ops and both load passes; torchspeed.Load
// fuses its 8 conv + add_relu pairs and answers like the saved module up to one rounding.
func TestINT8FuseConvAdd(t *testing.T) {
	if why := torch.ConvAddUnavailable(); why != "" {
		t.Skip(why)
	}
	if !torch.FastQDQApplies() {
		t.Skip("libtorch has FBGEMM: no fast_qdq variant to build on")
	}
	f := fixtures.Load(t).Get(t, "resnet18")
	cfg := int8Config(t, f, t.TempDir())
	// A quicker run: no fallback (thresholds loosened to pass without it), 4 calibration
	// samples, no channels-last or optimize_for_inference candidates.
	cfg.Quantize.Fallback, cfg.Validation.MinTop1Agreement, cfg.Validation.MinCosine = false, 0, 0.9
	cfg.Calibration.Limit, cfg.Optimize.ChannelsLast, cfg.Optimize.OptimizeForInference = 4, config.Off, config.Off
	cfg.Optimize.FastQDQ, cfg.Optimize.FuseConvAdd = config.On, config.On
	rep, err := Run(context.Background(), cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	const name = "INT8 static + fast_qdq + fuse_conv_add"
	s := mustStage(t, rep, name)
	if s.Status != report.StatusKept || !strings.Contains(s.Reason, "8 conv + add pairs fused; against FP32") {
		t.Errorf("row %s, %q: want kept (fuse_conv_add is on) with its validation", s.Status, s.Reason)
	}
	if s.Measurement == nil || *s.Measurement != "INT8 vs FP32" || s.P50Ms == nil {
		t.Errorf("row not timed in the INT8 vs FP32 measurement: measurement %v, p50 %v", s.Measurement, s.P50Ms)
	}
	for _, other := range []string{"INT8 static", "INT8 static + fast_qdq"} {
		if q := stageNamed(rep, other); q == nil || q.Status != report.StatusSuperseded {
			t.Errorf("%s row %+v: want superseded", other, q)
		}
	}
	man, err := torchspeed.ParseManifest(mustExtra(t, *rep.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(man.LoadPasses, []string{torchspeed.PassFastQDQ, torchspeed.PassFuseConvAdd}) {
		t.Fatalf("manifest: load passes %q: want [fast_qdq fuse_conv_add]", man.LoadPasses)
	}
	raw, m := loadBoth(t, *rep.Artifact, man.QEngine)
	rawNodes, _ := raw.NodeCounts()
	nodes, _ := m.Module().NodeCounts()
	if rawNodes["quantized::add_relu"] != 8 || rawNodes["torchspeed::conv2d_add"] != 0 || nodes["torchspeed::conv2d_add"] != 8 ||
		nodes["quantized::add_relu"]+nodes["torchspeed::add_relu"] != 0 {
		t.Errorf("node counts: on disk %v, loaded %v: want ATen's 8 add_relu on disk, 8 torchspeed::conv2d_add loaded", rawNodes, nodes)
	}
	w, g := firstOutputs(t, f, raw, m)
	var ab, aa, bb float64
	for i := range w {
		ab += float64(w[i]) * float64(g[i])
		aa += float64(w[i]) * float64(w[i])
		bb += float64(g[i]) * float64(g[i])
	}
	// The fused op skips the pair's rounding of the conv's output to u8: per element up to half a
	// conv quantum more or less. Its power, and so 1 - cosine, scales with the grid's step
	// squared: 4x per activation bit fewer (7-bit where oneDNN's kernels would saturate 8).
	minCos := 1 - 0.001*math.Pow(4, float64(8-max(7, min(8, man.ActivationBits))))
	if cos := ab / math.Sqrt(aa*bb); cos < minCos || validate.Argmax(w) != validate.Argmax(g) {
		t.Errorf("loaded vs saved: cosine %.6f (want >= %.4f, %d-bit activations), top-1 %d vs %d", cos, minCos, man.ActivationBits, validate.Argmax(g), validate.Argmax(w))
	}
}

// pickFuse keeps the fused variant on auto only when it is faster beyond doubt: from the
// shared measurement when its interval excludes 1, else from timing the two alone (confirm),
// and rejects it when that is not clear either or fails; true keeps it without asking. A kept
// variant supersedes the fast_qdq candidate it was built on.
func TestPickFuseNeedsAnInterval(t *testing.T) {
	// spread gives n samples around med, evenly from med*(1-w) to med*(1+w), shuffled by a
	// fixed stride so that round order does not sort them.
	spread := func(med time.Duration, w float64, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			k := (i * 7) % n
			out[i] = time.Duration(float64(med) * (1 - w + 2*w*float64(k)/float64(n-1)))
		}
		return out
	}
	ms := time.Millisecond
	for _, c := range []struct {
		name       string
		toggle     config.Toggle
		fuse       []time.Duration
		confirm    *pairResult // nil: confirm must not be asked
		confirmErr error
		want       state
		inReason   []string
	}{
		{"clearly faster", config.Auto, spread(3*ms, 0.01, 30), nil, nil, stKept,
			[]string{"1.33x faster than INT8 static + fast_qdq", "in INT8 vs FP32"}},
		{"clearly slower", config.Auto, spread(5*ms, 0.01, 30), nil, nil, stRejected,
			[]string{"not faster than INT8 static + fast_qdq beyond doubt", "in INT8 vs FP32"}},
		{"overlapping, then faster alone", config.Auto, spread(3900*time.Microsecond, 0.12, 30), &pairResult{0.95, 0.93, 0.97, 120}, nil, stKept,
			[]string{"1.05x faster than INT8 static + fast_qdq", "timed alone against it, 120 runs each"}},
		{"overlapping, still alike alone", config.Auto, spread(3900*time.Microsecond, 0.12, 30), &pairResult{0.99, 0.96, 1.02, 120}, nil, stRejected,
			[]string{"not faster than INT8 static + fast_qdq beyond doubt", "0.960-1.020", "timed alone"}},
		{"overlapping, timing alone fails", config.Auto, spread(3900*time.Microsecond, 0.12, 30), &pairResult{}, errors.New("boom"), stRejected,
			[]string{"could not be told apart", "timing the two alone failed: boom"}},
		{"on", config.On, spread(5*ms, 0.01, 30), nil, nil, stKept, []string{"optimize.fuse_conv_add is on"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Optimize.FuseConvAdd = c.toggle
			fast := &candidate{name: "INT8 static + fast_qdq", kind: kindINT8Fast, status: stCandidate}
			fuse := &candidate{name: fast.name + " + fuse_conv_add", kind: kindINT8Fuse, status: stCandidate, base: fast, reason: "8 conv + add pair(s) fused"}
			asked := 0
			r := &run{cfg: &cfg, rep: &report.Report{}, cands: []*candidate{fast, fuse},
				confirmPair: func(base, v *candidate) (pairResult, error) {
					asked++
					if base != fast || v != fuse {
						t.Errorf("confirm asked for %s vs %s", v.name, base.name)
					}
					if c.confirm == nil {
						return pairResult{}, errors.New("not expected")
					}
					return *c.confirm, c.confirmErr
				}}
			base := spread(4*ms, 0.12, 30)
			if c.confirm == nil {
				base = spread(4*ms, 0.01, 30)
			}
			result := func(name string, xs []time.Duration) *bench.Result {
				s, err := bench.Summarize(xs)
				if err != nil {
					t.Fatal(err)
				}
				return &bench.Result{Name: name, Samples: xs, Stats: s}
			}
			m := &measurement{name: "INT8 vs FP32", cmp: &bench.Comparison{Results: []*bench.Result{result(fast.name, base), result(fuse.name, c.fuse)}}}
			got := r.pickFuse(m, fast, fuse)
			wantAsked := 0
			if c.confirm != nil {
				wantAsked = 1
			}
			if asked != wantAsked {
				t.Errorf("confirm asked %d time(s), want %d (once, only when the shared measurement cannot decide)", asked, wantAsked)
			}
			for _, w := range c.inReason {
				if !strings.Contains(fuse.reason, w) {
					t.Errorf("reason %q lacks %q", fuse.reason, w)
				}
			}
			if c.want == stKept {
				if got != fuse || fuse.status != stCandidate || fast.status != stSuperseded {
					t.Errorf("picked %s; fused %s, base %s: want the fused one, its base superseded", got.name, fuse.status, fast.status)
				}
			} else if got != fast || fuse.status != stRejected || fast.status != stCandidate {
				t.Errorf("picked %s; fused %s, base %s: want the fused one rejected", got.name, fuse.status, fast.status)
			}
		})
	}
}

// pickFast keeps fast_qdq (the same bits from less work) unless it is slower beyond doubt: a tie
// the shared measurement and the pair timed alone cannot split keeps it, where fuse_conv_add's
// would be rejected.
func TestPickFastKeepsSameBitsOnTies(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name     string
		confirm  pairResult
		want     state
		inReason string
	}{
		{"alike alone", pairResult{1.02, 0.96, 1.08, 120}, stKept, "not slower than INT8 static beyond doubt"},
		{"faster alone", pairResult{0.95, 0.93, 0.97, 120}, stKept, "1.05x faster than INT8 static"},
		{"slower alone", pairResult{1.10, 1.05, 1.15, 120}, stRejected, "slower than INT8 static beyond doubt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			q := &candidate{name: "INT8 static", kind: kindINT8, status: stCandidate}
			fast := &candidate{name: q.name + " + fast_qdq", kind: kindINT8Fast, status: stCandidate, base: q, reason: "same bits"}
			r := &run{cfg: &cfg, rep: &report.Report{}, cands: []*candidate{q, fast},
				confirmPair: func(*candidate, *candidate) (pairResult, error) { return c.confirm, nil }}
			result := func(name string, med time.Duration) *bench.Result {
				xs := make([]time.Duration, 30)
				for i := range xs {
					xs[i] = time.Duration(float64(med) * (0.85 + 0.3*float64((i*7)%30)/29))
				}
				s, err := bench.Summarize(xs)
				if err != nil {
					t.Fatal(err)
				}
				return &bench.Result{Name: name, Samples: xs, Stats: s}
			}
			m := &measurement{name: "INT8 vs FP32", cmp: &bench.Comparison{Results: []*bench.Result{result(q.name, 10*ms), result(fast.name, 10*ms)}}}
			got := r.pickFast(m, q, fast)
			if !strings.Contains(fast.reason, c.inReason) {
				t.Errorf("reason %q lacks %q", fast.reason, c.inReason)
			}
			if (c.want == stKept) != (got == fast) || (c.want == stRejected) != (fast.status == stRejected) {
				t.Errorf("picked %s, fast_qdq %s; want %s", got.name, fast.status, c.want)
			}
		})
	}
}
