package export

import (
	"strconv"
	"strings"
	"testing"
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
