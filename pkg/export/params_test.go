package export

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// export triton with the measurement: every setting the backend offers is timed on the
// written model, the choice is one of them (a significant win over the defaults, or the
// defaults), and config.pbtxt, parsed back, holds exactly the chosen setting's parameters.
// No speed is asserted: which setting wins depends on the machine.
func TestTritonParamsMeasured(t *testing.T) {
	for _, name := range []string{"digits"} {
		t.Run(name, func(t *testing.T) {
			path, _ := artifact(t, name)
			a, err := Inspect(path)
			if err != nil {
				t.Fatal(err)
			}
			e, err := WriteTriton(a, t.TempDir(), TritonOptions{Measure: &CostOptions{Runs: 20, Warmup: 3, Params: true}})
			if err != nil {
				t.Fatal(err)
			}
			if e.Cost == nil || e.Cost.Params == nil {
				t.Fatalf("measured export without a parameter measurement: %+v", e.Cost)
			}
			pc := e.Cost.Params
			settings := TritonSettings()
			if len(pc.Settings) != len(settings) {
				t.Fatalf("%d settings timed, want %d: %+v", len(pc.Settings), len(settings), pc.Settings)
			}
			best, bestRatio := DefaultTritonSetting, 1.0
			for i, s := range pc.Settings {
				if s.Setting != settings[i].Name || s.P50Ms <= 0 || s.P95Ms < s.P50Ms || s.RatioLo > s.Ratio || s.RatioHi < s.Ratio {
					t.Errorf("setting %d: %+v (want %q with sane figures)", i, s, settings[i].Name)
				}
				if s.Faster && (s.RatioHi >= 1 || i == 0) {
					t.Errorf("%s counted faster with ratio interval %.3f-%.3f", s.Setting, s.RatioLo, s.RatioHi)
				}
				if s.Faster && s.Ratio < bestRatio {
					best, bestRatio = s.Setting, s.Ratio
				}
			}
			if pc.Chosen != best {
				t.Errorf("chosen %q, want %q (the fastest significant win, else the defaults): %+v", pc.Chosen, best, pc.Settings)
			}
			cfg, err := ReadTritonConfig(e.ConfigPath)
			if err != nil {
				t.Fatal(err)
			}
			want := pc.Params()
			want[ParamIntraOpThreads] = strconv.Itoa(a.Manifest.Runtime.Threads)
			want[ParamInterOpThreads] = strconv.Itoa(a.Manifest.Runtime.InteropThreads)
			if len(cfg.Parameters) != len(want) {
				t.Errorf("parameters %v, want %v", cfg.Parameters, want)
			}
			for k, v := range want {
				if got := cfg.Parameters[k].GetStringValue(); got != v {
					t.Errorf("parameter %s = %q, want %q (setting %q)", k, got, v, pc.Chosen)
				}
			}
			table := pc.Table()
			for _, s := range settings {
				if !strings.Contains(table, s.Name) {
					t.Errorf("table lacks %q:\n%s", s.Name, table)
				}
			}
			if !strings.Contains(strings.Join(e.Notes, "\n"), "executor parameters: "+pc.Chosen) {
				t.Errorf("notes do not give the choice: %q", e.Notes)
			}
			t.Logf("%s\n%s", table, e.Cost.Sentence)
		})
	}
}

// Each setting maps to the backend parameters that ask for it, and only the defaults ask for
// libtorch's defaults.
func TestTritonSettingParams(t *testing.T) {
	want := map[string]map[string]string{
		"defaults":                {ParamInferenceMode: "true", ParamDisableOptimized: "false", ParamEnableJITExecutor: "true", ParamEnableJITProfiling: "true"},
		"profiling off":           {ParamInferenceMode: "true", ParamDisableOptimized: "false", ParamEnableJITExecutor: "true", ParamEnableJITProfiling: "false"},
		"executor off":            {ParamInferenceMode: "true", ParamDisableOptimized: "false", ParamEnableJITExecutor: "false", ParamEnableJITProfiling: "true"},
		"optimized execution off": {ParamInferenceMode: "true", ParamDisableOptimized: "true", ParamEnableJITExecutor: "true", ParamEnableJITProfiling: "true"},
		"inference mode off":      {ParamInferenceMode: "false", ParamDisableOptimized: "false", ParamEnableJITExecutor: "true", ParamEnableJITProfiling: "true"},
	}
	got := TritonSettings()
	if len(got) != len(want) {
		t.Fatalf("%d settings, want %d", len(got), len(want))
	}
	for _, s := range got {
		w, ok := want[s.Name]
		if !ok {
			t.Fatalf("unexpected setting %q", s.Name)
		}
		p := s.Params()
		for k, v := range w {
			if p[k] != v {
				t.Errorf("%s: %s = %q, want %q", s.Name, k, p[k], v)
			}
		}
	}
}

// syntheticResult is a bench result of n latencies spread evenly around median m (±10%).
func syntheticResult(t *testing.T, name string, m time.Duration, n int) *bench.Result {
	t.Helper()
	r := &bench.Result{Name: name}
	for i := range n {
		r.Samples = append(r.Samples, m*time.Duration(90+(i*20)/n)/100)
	}
	s, err := bench.Summarize(r.Samples)
	if err != nil {
		t.Fatal(err)
	}
	r.Stats = s
	return r
}

// The choice on known latencies: the fastest significant win is written; a setting that is
// no faster, or slower, never is; with no win the defaults stay.
func TestChooseParams(t *testing.T) {
	settings := TritonSettings()
	ms := time.Millisecond
	results := func(d ...time.Duration) []*bench.Result {
		var rs []*bench.Result
		for i, x := range d {
			rs = append(rs, syntheticResult(t, settings[i].Name, x, 60))
		}
		return rs
	}
	// defaults 10 ms; profiling off 7 ms; executor off 8 ms; optimized off 10 ms; inference off 13 ms.
	pc, err := chooseParams(settings, results(10*ms, 7*ms, 8*ms, 10*ms, 13*ms))
	if err != nil {
		t.Fatal(err)
	}
	if pc.Chosen != "profiling off" {
		t.Fatalf("chosen %q, want profiling off: %+v", pc.Chosen, pc.Settings)
	}
	faster := map[string]bool{}
	for _, s := range pc.Settings {
		faster[s.Setting] = s.Faster
	}
	if !faster["executor off"] || faster["optimized execution off"] || faster["inference mode off"] || faster["defaults"] {
		t.Errorf("significant wins %v, want profiling off and executor off only", faster)
	}
	a := &Artifact{Manifest: &torchspeed.Manifest{}}
	p := TritonParameters(a, pc)
	if p[ParamEnableJITProfiling].GetStringValue() != "false" || p[ParamEnableJITExecutor].GetStringValue() != "true" ||
		p[ParamInferenceMode].GetStringValue() != "true" || p[ParamDisableOptimized].GetStringValue() != "false" {
		t.Errorf("parameters for profiling off: %v", p)
	}
	if !strings.Contains(pc.Table(), "profiling off") || !strings.Contains(pc.Why, "0.70x") {
		t.Errorf("table/why: %s / %s", pc.Table(), pc.Why)
	}
	c := &Cost{Server: "Triton", Params: pc}
	if want := fmt.Sprintf("with the chosen backend parameters (profiling off) p50 %.3f ms", pc.Settings[1].P50Ms); !strings.Contains(c.sentence(), want) {
		t.Errorf("sentence: %s", c.sentence())
	}
	// Equal latencies and slower ones: the defaults.
	pc, err = chooseParams(settings, results(10*ms, 10*ms, 11*ms, 10*ms, 12*ms))
	if err != nil {
		t.Fatal(err)
	}
	if pc.Chosen != DefaultTritonSetting || !strings.Contains(pc.Why, "no setting was significantly faster") {
		t.Errorf("chosen %q (%s), want the defaults", pc.Chosen, pc.Why)
	}
}
