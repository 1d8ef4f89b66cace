package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

func load(t *testing.T) *Input {
	t.Helper()
	f, err := os.Open("testdata/samples.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, err := read(f)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestFiguresMatchNumpyAndScipy checks every figure bench-peers prints against numpy's
// percentiles and scipy's binomial interval of the median (testdata/gen_testdata.py).
func TestFiguresMatchNumpyAndScipy(t *testing.T) {
	out, err := compute(load(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/want.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(out.Contenders) != len(want) {
		t.Fatalf("%d contenders, want %d", len(out.Contenders), len(want))
	}
	near := func(name, key string, got, w float64) {
		t.Helper()
		if math.Abs(got-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s %s = %v, want %v", name, key, got, w)
		}
	}
	for _, st := range out.Contenders {
		w := want[st.Contender]
		var g map[string]any
		js, _ := json.Marshal(st)
		if err := json.Unmarshal(js, &g); err != nil {
			t.Fatal(err)
		}
		for key, wv := range w {
			switch wv := wv.(type) {
			case float64:
				gv, ok := g[key].(float64)
				if !ok {
					t.Errorf("%s: %s missing", st.Contender, key)
					continue
				}
				near(st.Contender, key, gv, wv)
			case []any:
				gv, _ := g[key].([]any)
				if len(gv) != len(wv) {
					t.Errorf("%s %s = %v, want %v", st.Contender, key, g[key], wv)
					continue
				}
				for i := range wv {
					near(st.Contender, key, gv[i].(float64), wv[i].(float64))
				}
			}
		}
	}
}

// TestRatioAndTails checks the comparisons: the best peer, the ratio of levels with an
// interval that holds it, the paired p95/p50 difference and the floor.
func TestRatioAndTails(t *testing.T) {
	out, err := compute(load(t))
	if err != nil {
		t.Fatal(err)
	}
	if out.BestPeer != "ort-fp32" {
		t.Fatalf("best peer %q, want ort-fp32 (the faster peer)", out.BestPeer)
	}
	by := map[string]Stats{}
	for _, st := range out.Contenders {
		by[st.Contender] = st
	}
	ts := by["ts-bench"]
	// Both sides' second process is 3% slower and the slow round slows both: the ratio of
	// levels is the generating 1.2/1.6 within the noise.
	if ts.Ratio == nil || math.Abs(*ts.Ratio-0.75) > 0.03 {
		t.Fatalf("ts-bench ratio to best = %v, want about 0.75", ts.Ratio)
	}
	if lo, hi := ts.RatioCI[0], ts.RatioCI[1]; !(lo <= *ts.Ratio && *ts.Ratio <= hi) || hi-lo > 0.2 {
		t.Errorf("ratio interval [%v, %v] around %v", lo, hi, *ts.Ratio)
	}
	if ts.TailVs == nil || !(ts.TailVs.CI[0] <= ts.TailVs.Diff && ts.TailVs.Diff <= ts.TailVs.CI[1]) {
		t.Errorf("tail_vs_best %+v: want an interval around the difference", ts.TailVs)
	}
	if d := ts.Tail - by["ort-fp32"].Tail; math.Abs(ts.TailVs.Diff-d) > 1e-12 {
		t.Errorf("tail difference %v, want %v (own p95/p50s)", ts.TailVs.Diff, d)
	}
	if len(ts.TailCI) != 2 || !(ts.TailCI[0] <= ts.Tail && ts.Tail <= ts.TailCI[1]) {
		t.Errorf("p95/p50 %v outside its interval %v", ts.Tail, ts.TailCI)
	}
	if ts.Floor == nil || ts.Floor.Floor != "floor@ts-bench" || math.Abs(ts.Floor.Diff-(ts.Tail-by["floor@ts-bench"].Tail)) > 1e-12 {
		t.Errorf("above_floor %+v: want against floor@ts-bench", ts.Floor)
	}
	for _, name := range []string{"py-jit", "ort-fp32", "floor@ts-bench"} {
		if by[name].Ratio != nil || by[name].TailVs != nil {
			t.Errorf("%s has a ratio to the best peer; only torchspeed contenders do", name)
		}
	}
	// Same samples, same seed: the same intervals.
	again, _ := compute(load(t))
	a, _ := json.Marshal(out)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Error("two runs on the same samples differ")
	}
}

func TestBadSamples(t *testing.T) {
	for name, doc := range map[string]string{
		"negative":      `{"seed":1,"contenders":[{"contender":"a","kind":"peer","blocks":[[[5,-1]]],"other_cpu":[]}]}`,
		"unknown field": `{"seed":1,"contenders":[],"extra":1}`,
		"not json":      `run 5`,
	} {
		if _, err := read(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: read accepted %s", name, doc)
		}
	}
}
