package pipeline

import (
	"fmt"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"

	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
)

// settleRounds is the fewest timed rounds after which the quick search may end a measurement
// its decisions no longer depend on: a bootstrap interval of a median drawn from fewer values
// is narrower than the median's real spread.
const settleRounds = 10

// untilSettled makes the quick search's in-process measurement o of the original and cands
// (in measure's order) end early once every pair of the candidates that decide (decides) is
// settled: the 95% interval of the ratio of their p50s holds neither optimize.min_speedup nor
// its inverse, so more rounds would not move the ratio across the line a stage is kept by
// (the pair is faster, slower, or equal within the margin beyond doubt). withOrig adds the
// original to the pairs. The full search, a budget (which already caps the rounds) and
// measurements of fewer than twice settleRounds rounds run every round.
func (r *run) untilSettled(o bench.CompareOptions, cands []*candidate, decides func(*candidate) bool, withOrig bool) bench.CompareOptions {
	if !r.quick() || o.Runs < 2*settleRounds {
		return o
	}
	idx := []int{}
	if withOrig {
		idx = append(idx, 0)
	}
	for i, c := range cands {
		if decides(c) {
			idx = append(idx, i+1)
		}
	}
	if len(idx) < 2 {
		return o
	}
	ms, seed := r.cfg.Optimize.MinSpeedup, r.cfg.Bench.Seed
	o.Decided = func(samples [][]time.Duration) bool {
		if len(samples[0]) < settleRounds {
			return false
		}
		for a := range idx {
			for _, b := range idx[a+1:] {
				if !settled(samples[idx[a]], samples[b], ms, seed) {
					return false
				}
			}
		}
		return true
	}
	return o
}

// settled says whether the ratio of the p50s of b and a is beyond doubt on one side of
// minSpeedup and of its inverse: its 95% interval holds neither.
func settled(a, b []time.Duration, minSpeedup float64, seed uint64) bool {
	_, lo, hi, err := bench.RatioOfMediansCI(bench.Floats(a), bench.Floats(b), 0.95, 500, seed)
	if err != nil {
		return false
	}
	for _, line := range []float64{minSpeedup, 1 / minSpeedup} {
		if lo <= line && line <= hi {
			return false
		}
	}
	return true
}

// precisionMargin is how much faster, beyond doubt, the precision kept must have run in
// optimize's process for the quick search to leave out timing the other precision where the
// artifact runs. What moved the ranking between optimize's process and a served one was the
// allocator on a model that allocates hundreds of tensors a millisecond (the digits CNN: served
// INT8 with glibc 1.5x FP32's time, with tcmalloc tied), not a margin this wide on a model that
// allocates little.
const precisionMargin = 1.25

// precisionSettled says why the quick search does not serve the model of the other precision
// beside the artifact ("" when it must): the INT8-or-FP32 decision was taken by a margin of at
// least precisionMargin beyond doubt (the 95% interval of the ratio of p50s), on a model
// whose allocation rate leaves the allocator candidates out of the search. Serving the other
// precision doubles the runtime step's processes (resnet50: 6 of its 14).
func (r *run) precisionSettled(dec *int8Decision) string {
	if !r.quick() || r.opts.servePrecision || dec.meas == nil || dec.best8 == nil || dec.fp32 == nil {
		return ""
	}
	m := dec.meas
	res8 := m.result(dec.best8.name)
	res32 := m.cmp.Results[0]
	if dec.fp32 != r.orig {
		res32 = m.result(dec.fp32.name)
	}
	if res8 == nil || res32 == nil {
		return ""
	}
	kept, other := res8, res32
	if !dec.usedINT8 {
		kept, other = res32, res8
	}
	ratio, lo, hi, err := bench.RatioOfMediansCI(bench.Floats(other.Samples), bench.Floats(kept.Samples), 0.95, bench.DefaultResamples, r.cfg.Bench.Seed+501)
	if err != nil || hi > 1/precisionMargin {
		return ""
	}
	for _, c := range []*candidate{dec.best8, dec.fp32} {
		if rate := allocationRate(c); rate <= 0 || rate >= allocRateFloor {
			return ""
		}
	}
	return fmt.Sprintf("quick search: %s ran %.2fx faster than %s in optimize's process (p50 ratio %.3f, 95%% CI %.3f-%.3f, in %q), beyond the %.2fx margin by which serving the models in processes of their own has not been seen to turn the ranking on a model that allocates under %.0f tensors a millisecond; %s",
		kept.Name, 1/ratio, other.Name, ratio, lo, hi, m.name, precisionMargin, allocRateFloor, fullSearchHint)
}

// fastShareFloor is the share of the original's multiply-add work below which the quick search
// does not build a fast variant: a pass that speeds up ops doing under 1% of the work cannot
// make the model faster by more than that, under the 2% of optimize.min_speedup (resnet18's one
// linear layer, the classifier, does 0.03% of its work).
const fastShareFloor = 0.01

// fastShares counts the original's work by op (one profiled forward) and says, by pass, why a
// fast variant is not built in the quick search: fast_linear where matrix products (linear
// layers and the rest: an upper bound of what it swaps) are under fastShareFloor of the work,
// fast_conv where convolutions are. A pass on in the config, a stateful model (one more forward
// would move its state) or a count that fails leaves every variant to be built.
func (r *run) fastShares() map[string]string {
	o := r.cfg.Optimize
	if !r.quick() || r.call.stateful() || r.call.method != "forward" {
		return nil
	}
	var total float64
	var byOp map[string]float64
	var err error
	if err = r.orig.start(); err == nil {
		total, byOp, err = r.orig.mod.OpFLOPs(r.inputs...)
	}
	if err != nil || total <= 0 {
		return nil
	}
	conv := byOp["aten::_convolution"] / total
	skip := map[string]string{}
	why := func(share float64, what string) string {
		return fmt.Sprintf("not built (quick search): %s are %.2f%% of the original's multiply-add work (%.3g GFLOP a call, counted by op), under the %.0f%% where swapping them could make the model %.0f%% faster (optimize.min_speedup); %s",
			what, share*100, total/1e9, fastShareFloor*100, (o.MinSpeedup-1)*100, fullSearchHint)
	}
	if mm := 1 - conv; mm < fastShareFloor && o.FastLinear != config.On {
		skip[torchspeed.PassFastLinear] = why(mm, "matrix products (linear layers among them)")
	}
	if conv < fastShareFloor && o.FastConv != config.On {
		skip[torchspeed.PassFastConv] = why(conv, "convolutions")
	}
	return skip
}
