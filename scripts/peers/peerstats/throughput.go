package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/torchspeed/torchspeed/pkg/bench"
)

// ThroughputInput is one model's throughput run (`bench_peers.py --throughput`): every
// configuration (a contender at instances x threads) timed in the same rounds.
type ThroughputInput struct {
	Seed    uint64         `json:"seed"`
	Configs []ConfigSample `json:"configs"`
}

// ConfigSample is one configuration's latencies: Rounds[r][s] are the latencies (ns) stream s
// timed in round r, all streams started together.
type ConfigSample struct {
	Config    string        `json:"config"`
	Contender string        `json:"contender"`
	Kind      string        `json:"kind"`
	Instances int           `json:"instances"`
	Threads   int           `json:"threads"`
	Rounds    [][][]float64 `json:"rounds"`
	// OwnCPU is, per round, the CPUs the benchmark's own processes used during the block (the
	// configuration's streams, as the others are stopped): optional.
	OwnCPU []float64 `json:"own_cpu,omitempty"`
}

// ThroughputOutput is what the throughput table prints.
type ThroughputOutput struct {
	Configs []ConfigStats `json:"configs"`
	// Best is each contender's configuration with the highest median items/s.
	Best map[string]string `json:"best"`
	// BestPeer is the peer configuration with the highest median items/s; empty when no
	// peer ran.
	BestPeer string `json:"best_peer,omitempty"`
}

// ConfigStats are one configuration's figures: items/s per round (bench.WindowRate), their
// median with the order-statistic interval over rounds, and the latencies of every call under
// that load. Ratio is items/s over the best peer's, rounds resampled in pairs.
type ConfigStats struct {
	Config     string    `json:"config"`
	Contender  string    `json:"contender"`
	Kind       string    `json:"kind"`
	Instances  int       `json:"instances"`
	Threads    int       `json:"threads"`
	Rounds     int       `json:"rounds"`
	Calls      int       `json:"calls"`
	RoundRates []float64 `json:"round_items_per_s"`
	Rate       float64   `json:"items_per_s"`
	RateCI     []float64 `json:"items_per_s_ci95,omitempty"`
	P50        float64   `json:"p50_ms"`
	P99        float64   `json:"p99_ms"`
	// PerCPU is the median over rounds of items/s over the CPUs the configuration's own
	// processes used: items per CPU-second, which a share of the CPUs won from other work on a
	// shared machine does not raise. Absent without OwnCPU.
	PerCPU  *float64  `json:"items_per_cpu_s,omitempty"`
	Ratio   *float64  `json:"ratio_to_best_peer,omitempty"`
	RatioCI []float64 `json:"ratio_ci95,omitempty"`
}

func readThroughput(r io.Reader) (*ThroughputInput, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var in ThroughputInput
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("not a bench-peers throughput samples file: %w", err)
	}
	return &in, nil
}

// computeThroughput turns one model's throughput samples into the table's figures.
func computeThroughput(in *ThroughputInput) (*ThroughputOutput, error) {
	out := &ThroughputOutput{Configs: []ConfigStats{}, Best: map[string]string{}}
	best := map[string]int{}
	bestPeer := -1
	for _, c := range in.Configs {
		st, err := configStats(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Config, err)
		}
		if st == nil {
			continue
		}
		i := len(out.Configs)
		out.Configs = append(out.Configs, *st)
		if b, ok := best[c.Contender]; !ok || st.Rate > out.Configs[b].Rate {
			best[c.Contender] = i
		}
		if c.Kind == "peer" && (bestPeer < 0 || st.Rate > out.Configs[bestPeer].Rate) {
			bestPeer = i
		}
	}
	for name, i := range best {
		out.Best[name] = out.Configs[i].Config
	}
	if bestPeer < 0 {
		return out, nil
	}
	base := out.Configs[bestPeer]
	out.BestPeer = base.Config
	for i := range out.Configs {
		st := &out.Configs[i]
		if st.Kind != "torchspeed" {
			continue
		}
		ratio, lo, hi, err := bench.PairedRatioOfMediansCI(base.RoundRates, st.RoundRates, bench.Confidence, resamples, in.Seed)
		if err == nil {
			st.Ratio, st.RatioCI = &ratio, []float64{lo, hi}
		}
	}
	return out, nil
}

// configStats computes one configuration's figures; nil when it timed no round.
func configStats(c ConfigSample) (*ConfigStats, error) {
	if len(c.Rounds) == 0 {
		return nil, nil
	}
	st := &ConfigStats{Config: c.Config, Contender: c.Contender, Kind: c.Kind, Instances: c.Instances,
		Threads: c.Threads, Rounds: len(c.Rounds)}
	var all []float64
	for r, streams := range c.Rounds {
		rate, _, err := bench.WindowRate(streams)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r+1, err)
		}
		st.RoundRates = append(st.RoundRates, rate)
		for _, s := range streams {
			all = append(all, s...)
		}
	}
	st.Calls = len(all)
	slices.Sort(all)
	st.P50, st.P99 = ms(bench.Percentile(all, 0.5)), ms(bench.Percentile(all, 0.99))
	rates := slices.Sorted(slices.Values(st.RoundRates))
	st.Rate = bench.Percentile(rates, 0.5)
	if ci := bench.MedianCI(rates, bench.Confidence); ci.OK {
		st.RateCI = []float64{ci.Lo, ci.Hi}
	}
	if len(c.OwnCPU) == len(c.Rounds) {
		var per []float64
		for r, cpus := range c.OwnCPU {
			if cpus > 0 {
				per = append(per, st.RoundRates[r]/cpus)
			}
		}
		if len(per) > 0 {
			slices.Sort(per)
			v := bench.Percentile(per, 0.5)
			st.PerCPU = &v
		}
	} else if len(c.OwnCPU) > 0 {
		return nil, fmt.Errorf("own_cpu has %d rounds, rounds %d; want one figure per round", len(c.OwnCPU), len(c.Rounds))
	}
	if math.IsNaN(st.Rate) {
		return nil, fmt.Errorf("items/s is not a number")
	}
	return st, nil
}
