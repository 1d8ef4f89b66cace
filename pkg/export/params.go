package export

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
)

// TritonSetting is one way Triton's PyTorch backend can run a model, from its parameters.
type TritonSetting struct {
	Name string             `json:"name"`
	Exec torch.ExecSettings `json:"exec"`
}

// DefaultTritonSetting is the backend's (and libtorch's) default.
const DefaultTritonSetting = "defaults"

// TritonSettings are the settings an export measures: the defaults, then each parameter
// turned away from its default on its own.
func TritonSettings() []TritonSetting {
	d := torch.DefaultExecSettings
	noProfiling, noExecutor, noOptimized, noInference := d, d, d, d
	noProfiling.JITProfiling = false
	noExecutor.JITExecutor = false
	noOptimized.OptimizedExecution = false
	noInference.InferenceMode = false
	return []TritonSetting{
		{DefaultTritonSetting, d},
		{"profiling off", noProfiling},
		{"executor off", noExecutor},
		{"optimized execution off", noOptimized},
		{"inference mode off", noInference},
	}
}

// Params are the backend parameters that ask Triton for s.
func (s TritonSetting) Params() map[string]string {
	return map[string]string{
		ParamInferenceMode:      strconv.FormatBool(s.Exec.InferenceMode),
		ParamDisableOptimized:   strconv.FormatBool(!s.Exec.OptimizedExecution),
		ParamEnableJITExecutor:  strconv.FormatBool(s.Exec.JITExecutor),
		ParamEnableJITProfiling: strconv.FormatBool(s.Exec.JITProfiling),
	}
}

// SettingTiming is the plainly loaded model timed under one setting, against the defaults.
type SettingTiming struct {
	Setting string            `json:"setting"`
	Params  map[string]string `json:"params"`
	P50Ms   float64           `json:"p50_ms"`
	P95Ms   float64           `json:"p95_ms"`
	// Ratio is this setting's p50 over the defaults' (below 1: faster), with its 95% bootstrap
	// interval; Faster is a significant win: U test and interval agree.
	Ratio   float64 `json:"ratio"`
	RatioLo float64 `json:"ratio_ci_lo"`
	RatioHi float64 `json:"ratio_ci_hi"`
	Faster  bool    `json:"faster"`
	Verdict string  `json:"verdict"`
}

// ParamChoice is the measured choice of Triton's executor parameters.
type ParamChoice struct {
	Settings []SettingTiming `json:"settings"`
	// Chosen names the setting whose parameters config.pbtxt holds.
	Chosen string `json:"chosen"`
	Why    string `json:"why"`
}

// Params are the chosen setting's parameters.
func (p *ParamChoice) Params() map[string]string {
	for _, s := range p.Settings {
		if s.Setting == p.Chosen {
			return s.Params
		}
	}
	return TritonSettings()[0].Params()
}

// settingTargets are the served file loaded plainly once per setting (the JIT executor is
// chosen on a module's first call, so each setting needs its own module), each run with its
// setting applied first as Triton applies its parameters. The first is the defaults. close
// frees the modules.
func settingTargets(served string, settings []TritonSetting, ins []*torch.Tensor) (targets []bench.Target, close func(), err error) {
	var mods []*torch.Module
	close = func() {
		for _, m := range mods {
			m.Close()
		}
	}
	for _, s := range settings {
		m, err := torch.Load(served)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("plain load of %q: %w", served, err)
		}
		mods = append(mods, m)
		if err := m.Eval(); err != nil {
			close()
			return nil, nil, err
		}
		name := "plain torch::jit::load, " + s.Name
		targets = append(targets, &loaderTarget{name: name, run: func() ([]torch.Output, error) { return m.ForwardWith(s.Exec, ins...) }})
	}
	return targets, close, nil
}

// chooseParams compares each setting's results (results[i] is settings[i]'s; the first the
// defaults) with the defaults', and picks the fastest setting whose win is significant.
func chooseParams(settings []TritonSetting, results []*bench.Result) (*ParamChoice, error) {
	pc := &ParamChoice{Chosen: DefaultTritonSetting}
	best := 1.0
	for i, s := range settings {
		st := SettingTiming{Setting: s.Name, Params: s.Params(), P50Ms: ms(results[i].Stats.P50), P95Ms: ms(results[i].Stats.P95), Ratio: 1, RatioLo: 1, RatioHi: 1, Verdict: "baseline"}
		if i > 0 {
			p, err := bench.ComparePair(results[0], results[i], bench.DefaultResamples, uint64(100+i))
			if err != nil {
				return nil, err
			}
			st.Ratio, st.RatioLo, st.RatioHi, st.Verdict = p.Ratio, p.RatioLo, p.RatioHi, p.Verdict
			st.Faster = p.Significant && p.RatioHi < 1
			if st.Faster && p.Ratio < best {
				best, pc.Chosen = p.Ratio, s.Name
			}
		}
		pc.Settings = append(pc.Settings, st)
	}
	if pc.Chosen == DefaultTritonSetting {
		pc.Why = "no setting was significantly faster than the backend's defaults, so config.pbtxt keeps them"
	} else {
		pc.Why = fmt.Sprintf("%s took %.2fx the defaults' p50 time (95%% CI %.2f-%.2f)", pc.Chosen, best, pc.byName(pc.Chosen).RatioLo, pc.byName(pc.Chosen).RatioHi)
	}
	return pc, nil
}

func (p *ParamChoice) byName(name string) SettingTiming {
	for _, s := range p.Settings {
		if s.Setting == name {
			return s
		}
	}
	return SettingTiming{}
}

// Table is the measurement as text: one line per setting and the choice.
func (p *ParamChoice) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Triton backend parameters, measured (plain load, one fresh module per setting):\n")
	fmt.Fprintf(&b, "  %-24s %10s %10s %8s  %s\n", "setting", "p50 ms", "p95 ms", "ratio", "95% CI")
	for _, s := range p.Settings {
		mark := ""
		if s.Setting == p.Chosen {
			mark = "  <- chosen"
		}
		fmt.Fprintf(&b, "  %-24s %10.3f %10.3f %8.3f  %.3f-%.3f%s\n", s.Setting, s.P50Ms, s.P95Ms, s.Ratio, s.RatioLo, s.RatioHi, mark)
	}
	fmt.Fprintf(&b, "  chosen: %s: %s", p.Chosen, p.Why)
	return b.String()
}
