package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/report"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/validate"
)

// stagingPrefix names the hidden folder a run stages its outputs in, followed by its pid, so a
// later run can tell a dead run's leftovers from a live run's work.
const stagingPrefix = ".torchspeed-staging-"

// output is where a run's files go. Every path is computed once, here, and every check and
// write uses these paths.
//
// A run commits all its outputs together or none: they are staged in a hidden folder inside
// the output folder, then, holding an exclusive lock on the folder, the files they replace are
// moved aside, the new ones renamed in, and on any failure the old ones are put back.
//
// A run that passes writes the artifact, report.json, report.md and the plots, and removes a
// failed run's reports left from before. A run that fails validation (exit 3) writes no
// artifact and names its reports report.failed.json / report.failed.md (plots
// latency.failed.*): the previous successful run's artifact and reports stay as they were,
// consistent with each other, and nothing presents a failing report beside an artifact it
// does not describe.
type output struct {
	dir       string
	overwrite bool
	// created are the folders this run created, deepest last: removed again (if empty) when
	// the run fails.
	created  []string
	artifact string
}

// Output file names inside the output folder.
const (
	reportJSON       = "report.json"
	reportMD         = "report.md"
	failedReportJSON = "report.failed.json"
	failedReportMD   = "report.failed.md"
	plotBase         = "latency"
	failedPlotBase   = "latency.failed"
)

func prepareOutput(c *config.Config) (*output, error) {
	name := c.ArtifactName()
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0) {
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("model.name %q: must be a plain file name (no path separators); choose the folder with output.dir (-o)", name))
	}
	dir := c.Output.Dir
	if dir == "" {
		dir = "."
	}
	o := &output{dir: dir, overwrite: c.Output.Overwrite, artifact: filepath.Join(dir, name+".torchspeed.pt")}
	// Remember which folders do not exist yet, so a failed run can remove them again.
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		o.created = append([]string{d}, o.created...)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := safefile.CheckWritableDir(dir); err != nil {
		o.abandon()
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("output.dir %q: %w: choose another folder (output.dir or -o)", dir, err))
	}
	cleanStaleStaging(dir)
	// No output may replace the config or the data it names (even with overwrite): said
	// before an exists-check that would only suggest --overwrite.
	var outs []safefile.Named
	for _, p := range o.paths() {
		outs = append(outs, safefile.Named{What: "output", Path: p})
	}
	if err := safefile.CheckNotInput(outs, c.InputFiles()); err != nil {
		o.abandon()
		return nil, exitcode.New(exitcode.Usage, err)
	}
	if err := o.check(c.Model.Path); err != nil {
		o.abandon()
		return nil, err
	}
	return o, nil
}

// paths are every file a run may write or replace, in the output folder.
func (o *output) paths() []string {
	var ps []string
	ps = append(ps, o.artifact)
	for _, n := range []string{reportJSON, reportMD, failedReportJSON, failedReportMD} {
		ps = append(ps, filepath.Join(o.dir, n))
	}
	for _, b := range []string{plotBase, failedPlotBase} {
		for _, ext := range []string{"png", "svg"} {
			ps = append(ps, filepath.Join(o.dir, b+"."+ext))
		}
	}
	return ps
}

// check refuses, before any work, outputs that could not be written or would destroy
// something: a folder where a file goes, any existing output without overwrite, the input
// model itself.
func (o *output) check(model string) error {
	in, inErr := os.Stat(model)
	for _, p := range o.paths() {
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if st.IsDir() {
			return exitcode.New(exitcode.Usage, fmt.Errorf("output %q is a folder: remove or rename it, or choose another output.dir (-o)", p))
		}
		// Every file a run may write, not the artifact alone: reports and plots of an earlier
		// run are results too.
		if !o.overwrite {
			return exitcode.New(exitcode.Usage, fmt.Errorf("output %q exists: remove it, choose another output.dir, or set output.overwrite: true (--overwrite)", p))
		}
		if fst, err := os.Stat(p); err == nil && inErr == nil && os.SameFile(in, fst) {
			return exitcode.New(exitcode.Usage, fmt.Errorf("output %q would overwrite the input model %q: choose another output.dir or model.name", p, model))
		}
	}
	if absPath(o.artifact) == absPath(model) {
		return exitcode.New(exitcode.Usage, fmt.Errorf("output %q would overwrite the input model: choose another output.dir or model.name", o.artifact))
	}
	return nil
}

// abandon removes the folders this run created, when they are still empty.
func (o *output) abandon() {
	for i := len(o.created) - 1; i >= 0; i-- {
		os.Remove(o.created[i]) // fails, harmlessly, when not empty
	}
}

// replacedDir, inside a staging folder, holds the files a commit replaces until it succeeds.
const replacedDir = "replaced"

// cleanStaleStaging removes staging folders of runs that are no longer alive (killed during
// their write phase). A file such a run had moved aside to replace it, and whose name is free
// again (the kill came before its replacement was moved in), is put back first rather than
// lost. Folders of live runs, and names it cannot read a pid from, are kept.
func cleanStaleStaging(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), stagingPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			stale := filepath.Join(dir, e.Name())
			if old, err := os.ReadDir(filepath.Join(stale, replacedDir)); err == nil {
				for _, f := range old {
					back := filepath.Join(dir, f.Name())
					if _, err := os.Lstat(back); errors.Is(err, os.ErrNotExist) {
						os.Rename(filepath.Join(stale, replacedDir, f.Name()), back)
					}
				}
			}
			os.RemoveAll(stale)
		}
	}
}

// write stages the artifact (when passed) and the reports, then commits them together.
func (o *output) write(r *run, final *candidate, passed bool) (err error) {
	stage, err := os.MkdirTemp(o.dir, stagingPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("output.dir %q: %w", o.dir, err)
	}
	defer os.RemoveAll(stage)
	if !r.opts.Stop.stage(stage, true) {
		return fmt.Errorf("optimize interrupted: %w (nothing was written)", context.Canceled)
	}
	defer r.opts.Stop.stage(stage, false)
	var moves []move
	name := filepath.Base(o.artifact)
	jsonName, mdName, plot := reportJSON, reportMD, plotBase
	r.rep.Outcome = report.OutcomePassed
	if passed {
		man := r.manifest(final)
		save := final.mod
		if final.save != nil {
			save = final.save
		}
		// The artifact starts every user's stream: save it from a reset state, not the one
		// the checks and timings left behind.
		if err := r.call.start(save); err != nil {
			return fmt.Errorf("save: %w", err)
		}
		staged := filepath.Join(stage, name)
		if err := torchspeed.SaveArtifact(save, staged, man); err != nil {
			return explainDiskError(err, o.dir)
		}
		raw, err := man.Marshal() // with the records digest SaveArtifact filled in
		if err != nil {
			return err
		}
		// Prove the artifact loads and answers like the model measured, before it replaces
		// anything.
		if err := verifyArtifact(staged, final, r); err != nil {
			return err
		}
		r.rep.Artifact, r.rep.Manifest = strp(o.artifact), raw
		if sz, err := bench.MeasureModelSize(staged); err == nil && r.rep.Memory != nil {
			r.rep.Memory.Artifact = &sz
		}
		moves = append(moves, move{from: staged, to: o.artifact, exclusive: !o.overwrite})
	} else {
		r.rep.Outcome = report.OutcomeValidationFailed
		jsonName, mdName, plot = failedReportJSON, failedReportMD, failedPlotBase
	}
	if files, err := r.writePlot(stage, plot); err != nil {
		r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("latency plot not written: %v", err))
	} else {
		for _, f := range files {
			moves = append(moves, move{from: f, to: filepath.Join(o.dir, filepath.Base(f)), exclusive: !o.overwrite})
		}
	}
	if r.rep.Memory != nil {
		r.rep.Memory.PeakRSSBytes = bench.PeakRSS()
	}
	var js, md bytes.Buffer
	if err := r.rep.WriteJSON(&js); err != nil {
		return fmt.Errorf("report.json: %w", err)
	}
	if err := r.rep.WriteMarkdown(&md); err != nil {
		return fmt.Errorf("report.md: %w", err)
	}
	for n, b := range map[string][]byte{jsonName: js.Bytes(), mdName: md.Bytes()} {
		if err := safefile.WriteFile(filepath.Join(stage, n), b); err != nil {
			return explainDiskError(err, o.dir)
		}
		moves = append(moves, move{from: filepath.Join(stage, n), to: filepath.Join(o.dir, n), exclusive: !o.overwrite})
	}
	// A passing run retires an earlier failed run's reports; a failing one leaves the
	// passing outputs alone. Without overwrite nothing existing is touched (check found none).
	var retire []string
	if passed && o.overwrite {
		retire = []string{filepath.Join(o.dir, failedReportJSON), filepath.Join(o.dir, failedReportMD),
			filepath.Join(o.dir, failedPlotBase+".png"), filepath.Join(o.dir, failedPlotBase+".svg")}
	}
	unlock, ok := r.opts.Stop.commitLock()
	if !ok {
		return fmt.Errorf("optimize interrupted: %w (nothing was written)", context.Canceled)
	}
	err = commit(o.dir, stage, moves, retire)
	unlock()
	if err != nil {
		return err
	}
	if r.opts.written != nil {
		var paths []string
		for _, m := range moves {
			paths = append(paths, m.to)
		}
		r.opts.written(paths)
	}
	return nil
}

// move is one staged file and where it goes.
type move struct {
	from, to string
	// exclusive: fail if to exists (no overwrite), decided at the rename itself.
	exclusive bool
}

// commit moves every staged file into place, or none: under an exclusive lock on dir (so two
// runs into one folder cannot interleave their files), the files replaced and the retired
// ones are moved aside into the staging folder, the new ones moved in, and on any failure
// everything is put back. An exclusive move links the file in (failing if the name exists,
// even if another process created it a moment ago) instead of renaming over it.
func commit(dir, stage string, moves []move, retire []string) (err error) {
	lock, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("output.dir %q: %w", dir, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("output.dir %q: cannot lock it: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	for _, m := range moves {
		st, err := os.Lstat(m.to)
		if err != nil {
			continue
		}
		if st.IsDir() {
			return exitcode.New(exitcode.Usage, fmt.Errorf("output %q is a folder: remove or rename it; nothing was written", m.to))
		}
		if m.exclusive {
			return exitcode.New(exitcode.Usage, fmt.Errorf("output %q appeared while this run worked (another run into the same folder?): nothing was written; remove it or set output.overwrite: true (--overwrite)", m.to))
		}
	}
	aside := filepath.Join(stage, replacedDir)
	if err := os.Mkdir(aside, 0o700); err != nil {
		return fmt.Errorf("output.dir %q: %w", dir, err)
	}
	type moved struct{ from, to string }
	var old, placed []moved
	defer func() {
		if err == nil {
			return
		}
		for i := len(placed) - 1; i >= 0; i-- {
			os.Remove(placed[i].to)
		}
		for i := len(old) - 1; i >= 0; i-- {
			os.Rename(old[i].to, old[i].from)
		}
	}()
	targets := append([]string{}, retire...)
	for _, m := range moves {
		targets = append(targets, m.to)
	}
	for _, t := range targets {
		if _, err := os.Lstat(t); err != nil {
			continue
		}
		// Kept under its own name: a run killed here leaves it where the next run's
		// cleanStaleStaging can put it back.
		keep := filepath.Join(aside, filepath.Base(t))
		if err := os.Rename(t, keep); err != nil {
			return fmt.Errorf("output %q: %w; nothing was changed", t, err)
		}
		old = append(old, moved{from: t, to: keep})
	}
	for _, m := range moves {
		if err := os.Chmod(m.from, safefile.FileMode()); err != nil {
			return fmt.Errorf("output %q: %w; nothing was changed", m.to, err)
		}
		if m.exclusive {
			if err := os.Link(m.from, m.to); err != nil {
				if errors.Is(err, os.ErrExist) {
					return exitcode.New(exitcode.Usage, fmt.Errorf("output %q appeared while this run worked (another run into the same folder?): nothing was written; remove it or set output.overwrite: true (--overwrite)", m.to))
				}
				return fmt.Errorf("output %q: %w; nothing was changed", m.to, err)
			}
			placed = append(placed, moved{from: m.from, to: m.to})
			os.Remove(m.from)
			continue
		}
		if err := os.Rename(m.from, m.to); err != nil {
			return fmt.Errorf("output %q: %w; nothing was changed", m.to, err)
		}
		placed = append(placed, moved{from: m.from, to: m.to})
	}
	return nil
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
	c := &candidate{mod: m.Module(), channelsLast: m.Manifest.ChannelsLast, call: r.call}
	got, err := outputsOf(c, r.checks)
	if err != nil {
		return fmt.Errorf("the saved artifact does not run: %w", err)
	}
	want, err := outputsOf(final, r.checks)
	if err != nil {
		return err
	}
	maxAbs, _, err := validate.CompareOutputs(want, got)
	if err != nil || maxAbs > 1e-4 {
		return fmt.Errorf("the saved artifact answers differently from the model measured (max abs diff %.3g, %v)", maxAbs, err)
	}
	return nil
}
