package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// TestThroughputMatchesNumpy checks every figure of the throughput table against what
// testdata/gen_testdata.py computes with numpy and scipy: each round's items/s over the window
// all streams ran, their median and its interval, the latencies' p50/p99, the best
// configurations and the ratio to the best peer, which the paired interval must hold.
func TestThroughputMatchesNumpy(t *testing.T) {
	f, err := os.Open("testdata/throughput_samples.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := figures(f, readThroughput, computeThroughput)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/throughput_want.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Configs map[string]struct {
			RoundRates []float64 `json:"round_items_per_s"`
			Rate       float64   `json:"items_per_s"`
			RateCI     []float64 `json:"items_per_s_ci95"`
			P50        float64   `json:"p50_ms"`
			P99        float64   `json:"p99_ms"`
			Calls      int       `json:"calls"`
			Ratio      *float64  `json:"ratio_to_best_peer"`
			PerCPU     float64   `json:"items_per_cpu_s"`
		} `json:"configs"`
		Best     map[string]string `json:"best"`
		BestPeer string            `json:"best_peer"`
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	near := func(name, key string, got, w float64) {
		t.Helper()
		if math.Abs(got-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s %s = %v, want %v", name, key, got, w)
		}
	}
	if len(out.Configs) != len(want.Configs) {
		t.Fatalf("%d configurations, want %d", len(out.Configs), len(want.Configs))
	}
	for _, st := range out.Configs {
		w, ok := want.Configs[st.Config]
		if !ok {
			t.Fatalf("unexpected configuration %q", st.Config)
		}
		if len(st.RoundRates) != len(w.RoundRates) || st.Calls != w.Calls {
			t.Fatalf("%s: %d rounds %d calls, want %d and %d", st.Config, len(st.RoundRates), st.Calls, len(w.RoundRates), w.Calls)
		}
		for i := range w.RoundRates {
			near(st.Config, "round rate", st.RoundRates[i], w.RoundRates[i])
		}
		near(st.Config, "items/s", st.Rate, w.Rate)
		near(st.Config, "items/s CI lo", st.RateCI[0], w.RateCI[0])
		near(st.Config, "items/s CI hi", st.RateCI[1], w.RateCI[1])
		near(st.Config, "p50", st.P50, w.P50)
		near(st.Config, "p99", st.P99, w.P99)
		if st.PerCPU == nil {
			t.Fatalf("%s: no items per CPU-second", st.Config)
		}
		near(st.Config, "items per CPU-second", *st.PerCPU, w.PerCPU)
		if (st.Ratio == nil) != (w.Ratio == nil) {
			t.Fatalf("%s: ratio %v, want %v", st.Config, st.Ratio, w.Ratio)
		}
		if st.Ratio != nil {
			near(st.Config, "ratio", *st.Ratio, *w.Ratio)
			if !(st.RatioCI[0] <= *st.Ratio && *st.Ratio <= st.RatioCI[1]) {
				t.Errorf("%s: ratio %v outside its interval %v", st.Config, *st.Ratio, st.RatioCI)
			}
		}
	}
	if out.BestPeer != want.BestPeer {
		t.Errorf("best peer %q, want %q", out.BestPeer, want.BestPeer)
	}
	for c, cfg := range want.Best {
		if out.Best[c] != cfg {
			t.Errorf("best of %s: %q, want %q", c, out.Best[c], cfg)
		}
	}
}

// TestThroughputRefusesBadSamples: a stream without calls, a latency that is not positive and
// an unknown field are errors naming the problem, not figures.
func TestThroughputRefusesBadSamples(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"configs":[{"config":"a","contender":"a","kind":"peer","instances":2,"threads":1,"rounds":[[[1000],[]]]}]}`, "no calls"},
		{`{"configs":[{"config":"a","contender":"a","kind":"peer","instances":1,"threads":1,"rounds":[[[1000,0]]]}]}`, "positive"},
		{`{"configs":[],"extra":1}`, "unknown field"},
	} {
		_, err := figures(strings.NewReader(tc.in), readThroughput, computeThroughput)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.in, err, tc.want)
		}
	}
}
