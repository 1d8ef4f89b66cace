// Command peerstats computes every figure `make bench-peers` publishes from the raw latencies
// bench_peers.py recorded, with pkg/bench's tested statistics: the script drives the contenders
// and formats; the numbers come from here.
//
// Usage: peerstats SAMPLES.json > STATS.json
//
//	peerstats -throughput SAMPLES.json > STATS.json
//
// SAMPLES.json is one model's run: {"seed": 1, "noise_cpu": 0.1, "contenders": [{"contender":
// "ts-bench", "kind": "torchspeed", "floor_for": "", "blocks": [[[ns, ...], ...], ...],
// "other_cpu": [0.01, ...]}]}, where blocks[p][r] are the latencies (ns) process p timed in
// round r, and other_cpu the CPUs other processes used during each of the contender's blocks.
// kind is peer, torchspeed, diagnostic or floor; a floor names the contender it is calibrated
// to in floor_for. With -throughput, SAMPLES.json is a throughput run (ThroughputInput) and the
// output its table's figures (ThroughputOutput).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
)

// Input is one model's raw samples.
type Input struct {
	Seed       uint64      `json:"seed"`
	NoiseCPU   float64     `json:"noise_cpu"`
	Contenders []Contender `json:"contenders"`
}

// Contender is one contender's latencies, by process and round.
type Contender struct {
	Name     string      `json:"contender"`
	Kind     string      `json:"kind"`
	FloorFor string      `json:"floor_for,omitempty"`
	Blocks   [][][]int64 `json:"blocks"`
	OtherCPU []float64   `json:"other_cpu"`
}

// Output is what bench_peers.py prints and stores.
type Output struct {
	Contenders []Stats `json:"contenders"`
	// BestPeer is the peer with the lowest p50; empty when no peer ran.
	BestPeer           string   `json:"best_peer,omitempty"`
	BestPeerP95OverP50 *float64 `json:"best_peer_p95_over_p50,omitempty"`
}

// Stats are one contender's figures; milliseconds, intervals at 95%. An interval the sample
// cannot give is left out.
type Stats struct {
	Contender string     `json:"contender"`
	Kind      string     `json:"kind"`
	FloorFor  string     `json:"floor_for,omitempty"`
	Runs      int        `json:"runs"`
	Rounds    int        `json:"rounds"`
	Processes int        `json:"processes"`
	P50       float64    `json:"p50_ms"`
	P50CI     []float64  `json:"p50_ci95,omitempty"`
	P95       float64    `json:"p95_ms"`
	P99       float64    `json:"p99_ms"`
	Min       float64    `json:"min_ms"`
	Mean      float64    `json:"mean_ms"`
	Tail      float64    `json:"p95_over_p50"`
	TailCI    []float64  `json:"p95_over_p50_ci95,omitempty"`
	ProcP50   []float64  `json:"process_p50_ms"`
	Spread    float64    `json:"process_spread"`
	OtherMed  float64    `json:"other_cpu_median"`
	OtherMax  float64    `json:"other_cpu_max"`
	Noisy     int        `json:"noisy_blocks"`
	Blocks    int        `json:"blocks"`
	Ratio     *float64   `json:"ratio_to_best,omitempty"`
	RatioCI   []float64  `json:"ratio_ci95,omitempty"`
	TailVs    *TailVs    `json:"tail_vs_best,omitempty"`
	Floor     *FloorDiff `json:"above_floor,omitempty"`
}

// TailVs is a contender's p95/p50 minus the best peer's, rounds resampled in pairs.
type TailVs struct {
	Diff   float64   `json:"diff"`
	CI     []float64 `json:"ci95"`
	Worse  bool      `json:"worse"`
	Better bool      `json:"better"`
}

// FloorDiff is a contender's p95/p50 minus the machine floor's at its own call length.
type FloorDiff struct {
	Floor string  `json:"floor"`
	Diff  float64 `json:"diff"`
}

// resamples of every bootstrap here: intervals to two decimals.
const resamples = 2000

func main() {
	args := os.Args[1:]
	throughput := len(args) == 2 && args[0] == "-throughput"
	if throughput {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: peerstats [-throughput] SAMPLES.json > STATS.json")
		os.Exit(2)
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerstats:", err)
		os.Exit(2)
	}
	var out any
	if throughput {
		out, err = figures(f, readThroughput, computeThroughput)
	} else {
		out, err = figures(f, read, compute)
	}
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "peerstats: %s: %v\n", args[0], err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "peerstats:", err)
		os.Exit(1)
	}
}

// figures reads samples with read and computes their figures with compute.
func figures[In, Out any](r io.Reader, read func(io.Reader) (*In, error), compute func(*In) (*Out, error)) (*Out, error) {
	in, err := read(r)
	if err != nil {
		return nil, err
	}
	return compute(in)
}

func read(r io.Reader) (*Input, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var in Input
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("not a bench-peers samples file: %w", err)
	}
	for _, c := range in.Contenders {
		for p, rounds := range c.Blocks {
			for r, b := range rounds {
				for _, ns := range b {
					if ns <= 0 {
						return nil, fmt.Errorf("%s process %d round %d: latency %d ns; latencies are positive", c.Name, p+1, r+1, ns)
					}
				}
			}
		}
	}
	return &in, nil
}

func ms(v float64) float64 { return v / 1e6 }

// compute turns raw samples into every published figure.
func compute(in *Input) (*Output, error) {
	out := &Output{Contenders: []Stats{}}
	rounds := map[string][][]float64{}
	procs := map[string]*bench.ProcessResult{}
	for _, c := range in.Contenders {
		st, pooled, pr, err := contenderStats(c, in.NoiseCPU, in.Seed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		if st == nil {
			continue // no latencies: never ran a whole round
		}
		rounds[c.Name], procs[c.Name] = pooled, pr
		out.Contenders = append(out.Contenders, *st)
	}
	best := -1
	for i, st := range out.Contenders {
		if st.Kind == "peer" && (best < 0 || st.P50 < out.Contenders[best].P50) {
			best = i
		}
	}
	if best >= 0 {
		b := out.Contenders[best]
		out.BestPeer = b.Contender
		out.BestPeerP95OverP50 = &b.Tail
	}
	for i := range out.Contenders {
		st := &out.Contenders[i]
		if best >= 0 && (st.Kind == "torchspeed" || st.Kind == "diagnostic") {
			base := out.Contenders[best].Contender
			ratio, lo, hi, err := bench.ProcessRatioCI(procs[base], procs[st.Contender], resamples, in.Seed)
			if err == nil {
				st.Ratio, st.RatioCI = &ratio, []float64{lo, hi}
			}
			d, lo, hi, err := bench.TailRatioDiffCI(rounds[st.Contender], rounds[base], bench.Confidence, resamples, in.Seed)
			if err == nil {
				st.TailVs = &TailVs{Diff: d, CI: []float64{lo, hi}, Worse: lo > 0, Better: hi < 0}
			}
		}
		if f := floorOf(out.Contenders, *st); f != nil {
			st.Floor = &FloorDiff{Floor: f.Contender, Diff: st.Tail - f.Tail}
		}
	}
	return out, nil
}

// floorOf is the floor a contender's p95/p50 is set against: the one calibrated to it, else,
// for torchspeed contenders, ts-bench's, and for peers the one calibrated to a peer.
func floorOf(all []Stats, c Stats) *Stats {
	if c.Kind == "floor" {
		return nil
	}
	kind := map[string]string{}
	for _, s := range all {
		kind[s.Contender] = s.Kind
	}
	var own, ts, peer *Stats
	for i := range all {
		f := &all[i]
		if f.Kind != "floor" {
			continue
		}
		switch {
		case f.FloorFor == c.Contender:
			own = f
		case f.FloorFor == "ts-bench":
			ts = f
		case kind[f.FloorFor] == "peer":
			peer = f
		}
	}
	switch {
	case own != nil:
		return own
	case c.Kind == "torchspeed":
		return ts
	case c.Kind == "peer":
		return peer
	}
	return nil
}

// contenderStats computes one contender's own figures; nil when it has no latencies. It also
// returns its latencies pooled per round, and per process and round for ProcessRatioCI.
func contenderStats(c Contender, noiseCPU float64, seed uint64) (*Stats, [][]float64, *bench.ProcessResult, error) {
	pr := &bench.ProcessResult{Name: c.Name}
	var all []float64
	var perRound [][]float64
	st := &Stats{Contender: c.Name, Kind: c.Kind, FloorFor: c.FloorFor, ProcP50: []float64{}}
	for _, rounds := range c.Blocks {
		var proc []float64
		var blocks [][]time.Duration
		for r, b := range rounds {
			for len(perRound) <= r {
				perRound = append(perRound, nil)
			}
			ds := make([]time.Duration, len(b))
			for i, ns := range b {
				ds[i] = time.Duration(ns)
				perRound[r] = append(perRound[r], float64(ns))
				proc = append(proc, float64(ns))
			}
			blocks = append(blocks, ds)
		}
		if len(proc) == 0 {
			continue
		}
		slices.Sort(proc)
		st.ProcP50 = append(st.ProcP50, ms(bench.Percentile(proc, 0.5)))
		pr.Blocks = append(pr.Blocks, blocks)
		all = append(all, proc...)
	}
	if len(all) == 0 {
		return nil, nil, nil, nil
	}
	st.Runs, st.Rounds, st.Processes = len(all), len(perRound), len(pr.Blocks)
	slices.Sort(all)
	st.P50, st.P95, st.P99 = ms(bench.Percentile(all, 0.5)), ms(bench.Percentile(all, 0.95)), ms(bench.Percentile(all, 0.99))
	st.Min = ms(all[0])
	var sum float64
	for _, v := range all {
		sum += v
	}
	st.Mean = ms(sum / float64(len(all)))
	if ci := bench.MedianCI(all, bench.Confidence); ci.OK {
		st.P50CI = []float64{ms(ci.Lo), ms(ci.Hi)}
	}
	st.Tail = bench.P95OverP50(slices.Clone(all))
	if _, lo, hi, err := bench.TailRatioRoundsCI(perRound, bench.Confidence, resamples, seed); err == nil {
		st.TailCI = []float64{lo, hi}
	}
	st.Spread = slices.Max(st.ProcP50) / slices.Min(st.ProcP50)
	if len(c.OtherCPU) > 0 {
		oc := slices.Clone(c.OtherCPU)
		slices.Sort(oc)
		st.OtherMed, st.OtherMax = bench.Percentile(oc, 0.5), oc[len(oc)-1]
		for _, v := range oc {
			if v > noiseCPU {
				st.Noisy++
			}
		}
	}
	st.Blocks = len(c.OtherCPU)
	if math.IsNaN(st.Tail) || math.IsInf(st.Spread, 0) {
		return nil, nil, nil, errors.New("a median is not positive; latencies must be positive")
	}
	return st, perRound, pr, nil
}
