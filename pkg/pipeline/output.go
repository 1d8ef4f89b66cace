package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// finalBench measures the chosen model against the original, interleaved, with the configured
// run count: the speedup the report states.
func (r *run) finalBench() error {
	final := r.best()
	r.rep.Stages = r.stageRows()
	if final == r.orig {
		r.rep.Warnings = append(r.rep.Warnings, "no step made the model faster on this machine: the artifact is the original (frozen where possible)")
	}
	runs := r.cfg.Bench.Runs
	opts := bench.CompareOptions{
		Options: bench.Options{Runs: runs, Duration: r.cfg.Bench.Duration, Warmup: r.cfg.Bench.Warmup},
		Order:   bench.Shuffled, Seed: r.cfg.Bench.Seed,
	}
	if runs == 0 {
		opts.Options.Runs = 0
	}
	r.logf("final benchmark: original vs %s, %d interleaved rounds", final.name, runs)
	opt := &candidate{}
	*opt = *final
	cmp, err := bench.Compare([]bench.Target{
		&target{ctx: r.ctx, name: "original", c: r.orig, inputs: r.inputs},
		&target{ctx: r.ctx, name: "optimized", c: opt, inputs: r.inputs},
	}, opts)
	if err != nil {
		return fmt.Errorf("final benchmark: %w", err)
	}
	o, n := cmp.Results[0].Stats, cmp.Results[1].Stats
	p := cmp.Pairs[0]
	r.rep.Bench = &report.Bench{
		Runs: cmp.Rounds, Threads: torch.NumThreads(),
		OriginalP50: msOf(o.P50), OriginalP95: msOf(o.P95),
		OptimizedP50: msOf(n.P50), OptimizedP90: msOf(n.P90), OptimizedP95: msOf(n.P95), OptimizedP99: msOf(n.P99),
		Verdict: p.Verdict, Throughput: n.Throughput, Raw: cmp,
	}
	if p.Ratio > 0 {
		r.rep.Bench.Speedup, r.rep.Bench.SpeedupLo, r.rep.Bench.SpeedupHi = 1/p.Ratio, 1/p.RatioHi, 1/p.RatioLo
	}
	r.rep.Warnings = append(r.rep.Warnings, p.Warnings...)
	r.rep.Warnings = append(r.rep.Warnings, n.Warnings...)
	r.roofline()
	return nil
}

// output stages every file in a hidden folder inside the output folder and renames them into
// place only at the end, so a failure or Ctrl-C leaves nothing half-written.
type output struct {
	dir      string
	artifact string
}

func prepareOutput(c *config.Config) (*output, error) {
	dir := c.Output.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output.dir %q: cannot create it: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".torchspeed-write-check-*")
	if err != nil {
		return nil, fmt.Errorf("output.dir %q: not writable: %w: choose another folder (output.dir or -o)", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	art := filepath.Join(dir, c.ArtifactName()+".torchspeed.pt")
	if _, err := os.Stat(art); err == nil && !c.Output.Overwrite {
		return nil, fmt.Errorf("output %q exists: remove it, choose another output.dir, or set output.overwrite: true (--overwrite)", art)
	}
	if abs1, abs2 := absPath(art), absPath(c.Model.Path); abs1 == abs2 {
		return nil, fmt.Errorf("output %q would overwrite the input model: choose another output.dir", art)
	}
	return &output{dir: dir, artifact: art}, nil
}

// write saves the artifact (unless withArtifact is false) and the reports.
func (o *output) write(r *run, final *candidate, withArtifact bool) (err error) {
	stage, err := os.MkdirTemp(o.dir, ".torchspeed-staging-*")
	if err != nil {
		return fmt.Errorf("output.dir %q: %w", o.dir, err)
	}
	defer os.RemoveAll(stage)
	man := r.manifest(final)
	r.rep.Manifest = man
	name := filepath.Base(o.artifact)
	if withArtifact {
		r.rep.Artifact = o.artifact
		save := final.mod
		if final.save != nil {
			save = final.save
		}
		if err := torchspeed.SaveArtifact(save, filepath.Join(stage, name), man); err != nil {
			return explainDiskError(err, o.dir)
		}
		// Prove the artifact loads and answers like the model measured, before it replaces
		// anything.
		if err := verifyArtifact(filepath.Join(stage, name), final, r); err != nil {
			return err
		}
	}
	if err := r.writePlot(stage); err != nil {
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("latency plot not written: %v", err))
	}
	var js, md bytes.Buffer
	if err := r.rep.WriteJSON(&js); err != nil {
		return err
	}
	if err := r.rep.WriteMarkdown(&md); err != nil {
		return err
	}
	for n, b := range map[string][]byte{"report.json": js.Bytes(), "report.md": md.Bytes()} {
		if err := writeSynced(filepath.Join(stage, n), b); err != nil {
			return explainDiskError(err, o.dir)
		}
	}
	entries, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(o.dir, e.Name())); err != nil {
			return fmt.Errorf("output.dir %q: %w", o.dir, err)
		}
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func explainDiskError(err error, dir string) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("output.dir %q: disk full while saving; nothing was written: free space or choose another folder (%w)", dir, err)
	}
	return fmt.Errorf("output.dir %q: %w", dir, err)
}

// verifyArtifact loads the staged artifact the way users will and checks its outputs.
func verifyArtifact(path string, final *candidate, r *run) error {
	m, err := torchspeed.Load(path, torchspeed.LoadOptions{KeepThreads: true})
	if err != nil {
		return fmt.Errorf("the saved artifact does not load back: %w", err)
	}
	defer m.Close()
	c := &candidate{mod: m.Module(), channelsLast: m.Manifest.ChannelsLast}
	got, err := outputsOf(c, r.checks)
	if err != nil {
		return fmt.Errorf("the saved artifact does not run: %w", err)
	}
	want, err := outputsOf(final, r.checks)
	if err != nil {
		return err
	}
	maxAbs, _, err := agreement(want, got)
	if err != nil || maxAbs > 1e-4 {
		return fmt.Errorf("the saved artifact answers differently from the model measured (max abs diff %.3g, %v)", maxAbs, err)
	}
	return nil
}

func (r *run) manifest(final *candidate) *torchspeed.Manifest {
	m := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: version.Version, Libtorch: torch.Version(),
		Created: time.Now().UTC(), SourceName: filepath.Base(r.cfg.Model.Path), SourceSHA256: r.rep.Model.SHA256,
		LoadPasses: final.passes, ChannelsLast: final.channelsLast, Precision: final.precision,
		QEngine: final.engine, FP32Layers: final.fp32Layers, Steps: final.steps,
		Runtime: torchspeed.Runtime{Threads: torch.NumThreads(), InteropThreads: r.cfg.Runtime.InteropThreads, Allocator: r.cfg.Runtime.Allocator},
	}
	if m.LoadPasses == nil {
		m.LoadPasses = []string{}
	}
	if len(m.LoadPasses) == 0 && final.precision == "fp32" && slices.Contains(final.steps, "freeze") {
		m.LoadPasses = []string{torchspeed.PassFreeze}
	}
	for _, in := range r.cfg.Model.Inputs {
		m.Inputs = append(m.Inputs, torchspeed.InputSpec{Name: in.Name, Shape: in.Shape, DType: in.DType})
	}
	if v := r.rep.Validation; v != nil {
		m.Validation = v.Metrics
	} else {
		m.Validation = map[string]float64{"max_abs_error": final.maxAbs, "cosine": final.cosine}
	}
	return m
}
