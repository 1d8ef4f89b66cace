package export

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

//go:embed torchserve_handler.py
var torchServeHandler []byte

// TorchServe file names in the export folder.
const (
	TorchServeHandlerFile    = "torchspeed_handler.py"
	TorchServeSpecFile       = "torchspeed_inputs.json"
	TorchServeModelConfig    = "model-config.yaml"
	TorchServeConfigProperty = "config.properties"
)

// TorchServeOptions adjust a TorchServe export.
type TorchServeOptions struct {
	// Name is the model name (default: the artifact's file name without .torchspeed.pt).
	Name string
	// Workers per model, as measured by `torchspeed bench --instances` on the serving machine;
	// 0 means 1 (the manifest holds no instance measurement).
	Workers   int
	Overwrite bool
	// Machine is the CPU whose instruction sets the exported runtime environment may use (nil:
	// this machine's).
	Machine *runenv.Machine
	// Keep lists files besides the artifact that the export reads (the batch sweep report): no
	// file it writes may be one of them.
	Keep []string
	// BatchSweep is a `torchspeed bench --sweep-batch` result for the artifact (ReadBatchSweep):
	// batchSize and maxBatchDelay come from it when it shows batching pays.
	BatchSweep *bench.SweepResult
	// StockOps serves the graph with libtorch's operators only (see TritonOptions.StockOps).
	StockOps bool
}

// TorchServeModelConfigFile is model-config.yaml: the keys TorchServe reads per model.
type TorchServeModelConfigFile struct {
	MinWorkers      int `yaml:"minWorkers" json:"minWorkers"`
	MaxWorkers      int `yaml:"maxWorkers" json:"maxWorkers"`
	BatchSize       int `yaml:"batchSize" json:"batchSize"`
	MaxBatchDelay   int `yaml:"maxBatchDelay" json:"maxBatchDelay"`
	ResponseTimeout int `yaml:"responseTimeout" json:"responseTimeout"`
}

// TorchServeSpec is torchspeed_inputs.json, which the handler reads.
type TorchServeSpec struct {
	Inputs    []TorchServeInput `json:"inputs"`
	Batchable bool              `json:"batchable"`
	Threads   int               `json:"threads,omitempty"`
	QEngine   string            `json:"qengine,omitempty"`
	// OpLibrary is torch.OpsLibraryName, archived beside the model, when the model calls
	// torchspeed's operators: the handler loads it before the model.
	OpLibrary string `json:"op_library,omitempty"`
}

// TorchServeInput is one model input in TorchServeSpec.
type TorchServeInput struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// TorchServeExport is what WriteTorchServe wrote.
type TorchServeExport struct {
	Dir             string                    `json:"dir"`
	Files           []string                  `json:"files"`
	ModelConfig     TorchServeModelConfigFile `json:"model_config"`
	Properties      map[string]string         `json:"config_properties"`
	ArchiverCommand string                    `json:"archiver_command"`
	// OptimizedSaved: NAME.pt holds the graph after optimize_for_inference, not the artifact.
	OptimizedSaved bool `json:"optimized_saved"`
	// SavedPasses are the artifact's load-time passes whose result NAME.pt holds, and
	// SavedChannelsLast when its graph converts the inputs to channels-last itself.
	SavedPasses []string `json:"saved_passes"`
	Notes       []string `json:"notes"`
}

// WriteTorchServe writes into dir what torch-model-archiver takes for a: the artifact as
// NAME.pt, a handler and the input spec it reads, model-config.yaml (workers, batch size, max
// batch delay), config.properties (cpu_launcher_enable and cpu_launcher_args with the
// artifact's threads per worker), and archive.sh with the exact archiver command.
func WriteTorchServe(a *Artifact, dir string, o TorchServeOptions) (*TorchServeExport, error) {
	name := o.Name
	if name == "" {
		name = DefaultName(a.Path)
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("export torchserve %q: %w", a.Path, err)
	}
	for _, out := range a.Outputs {
		if _, err := tupleIndex(out.Name); err != nil {
			return nil, fmt.Errorf("export torchserve %q: %w: the handler serves a tensor or a flat tuple of tensors; make forward return a tuple", a.Path, err)
		}
	}
	var notes []string
	workers := o.Workers
	if workers <= 0 {
		workers = 1
		notes = append(notes, "1 worker: the manifest records no instance measurement; measure with `torchspeed bench --instances N` on the serving machine and pass --workers")
	}
	mc := TorchServeModelConfigFile{MinWorkers: workers, MaxWorkers: workers, BatchSize: 1, MaxBatchDelay: 0, ResponseTimeout: 120}
	switch {
	case o.BatchSweep == nil:
		notes = append(notes, "batchSize 1, maxBatchDelay 0: the manifest records no throughput sweep over batch sizes, so nothing shows that batching pays for this model; pass --batch-sweep with a `torchspeed bench --sweep-batch --json` report")
	case !a.Batchable:
		notes = append(notes, "batchSize 1: the model is not batchable")
	default:
		db, why := DynamicBatching(o.BatchSweep, a.Manifest.Runtime.Threads)
		if db == nil {
			notes = append(notes, "batchSize 1: "+why)
			break
		}
		// TorchServe counts the delay in whole milliseconds; rounding down keeps it within
		// the budget.
		mc.BatchSize = int(db.PreferredBatchSize[0])
		mc.MaxBatchDelay = int(db.MaxQueueDelayMicroseconds / 1000)
		notes = append(notes, why+fmt.Sprintf(" (maxBatchDelay %d ms)", mc.MaxBatchDelay))
	}
	threads := a.Manifest.Runtime.Threads
	notes = append(notes, "TorchServe's launcher (torch.backends.xeon.run_cpu) pins each worker with numactl: install it on the server (apt-get install numactl); without it TorchServe logs \"torch.backends.xeon.run_cpu is not available\" and runs the workers unpinned")
	props := map[string]string{
		"cpu_launcher_enable":       "true",
		"cpu_launcher_args":         launcherArgs(threads, a.Manifest.Runtime.Allocator),
		"default_workers_per_model": strconv.Itoa(workers),
	}
	spec := TorchServeSpec{Batchable: a.Batchable, Threads: threads, QEngine: a.Manifest.QEngine}
	for _, in := range a.Inputs {
		spec.Inputs = append(spec.Inputs, TorchServeInput{Name: in.Name, DType: in.DType.String(), Shape: in.Shape})
	}
	if !a.Batchable {
		notes = append(notes, "requests carry the full input shapes (no batch dimension added): "+a.BatchNote)
	}
	mcYAML, err := yaml.Marshal(mc)
	if err != nil {
		return nil, err
	}
	var propText strings.Builder
	propText.WriteString("# Written by torchspeed export torchserve: threads per worker from the artifact's manifest.\n")
	for _, k := range []string{"cpu_launcher_enable", "cpu_launcher_args", "default_workers_per_model"} {
		fmt.Fprintf(&propText, "%s=%s\n", k, props[k])
	}
	modelFile := name + ".pt"
	e := &TorchServeExport{Dir: dir, ModelConfig: mc, Properties: props, Notes: notes}
	env, envNote, envWarnings, err := RuntimeEnv(a.Manifest.Runtime, filepath.Join(dir, RuntimeEnvFile), machineOr(o.Machine), a.Manifest.CPU.Name())
	e.Notes = append(e.Notes, warningNotes(envWarnings)...)
	if err != nil {
		return nil, fmt.Errorf("export torchserve: %w", err)
	}
	var outs []safefile.Named
	for _, f := range []string{modelFile, TorchServeModelConfig, TorchServeConfigProperty, RuntimeEnvFile, torch.OpsLibraryName} {
		outs = append(outs, safefile.Named{What: f, Path: filepath.Join(dir, f)})
	}
	if err := safefile.CheckNotInput(outs, keep(a.Path, o.Keep)); err != nil {
		return nil, tserr.BadInput(fmt.Errorf("export torchserve: %w", err))
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("export torchserve: create %s: %w", dir, err)
	}
	// Two exports into one folder take turns (see WriteTriton).
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("export torchserve: %w", err)
	}
	defer unlock()
	if !o.Overwrite {
		for _, f := range []string{modelFile, TorchServeModelConfig, TorchServeConfigProperty, torch.OpsLibraryName} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return nil, fmt.Errorf("export torchserve: %s exists: pass --overwrite to replace it, or choose another -o", filepath.Join(dir, f))
			}
		}
	}
	opsLib, stock, why := opsLibrary(a, o.StockOps)
	if why != "" {
		e.Notes = append(e.Notes, why)
	}
	p := filepath.Join(dir, modelFile)
	sm, err := writeServedModel(a, p, stock)
	if err != nil {
		return nil, fmt.Errorf("export torchserve: %w", err)
	}
	e.OptimizedSaved, e.SavedPasses = sm.saved(), sm.passes
	if sm.note != "" {
		e.Notes = append(e.Notes, sm.note)
	}
	e.Files = append(e.Files, p)
	extra := TorchServeSpecFile
	if sm.ops {
		// The handler loads it with torch.ops.load_library before the model.
		lib := filepath.Join(dir, torch.OpsLibraryName)
		if err := copyFile(opsLib, lib); err != nil {
			os.Remove(p)
			return nil, fmt.Errorf("export torchserve: %w", err)
		}
		e.Files = append(e.Files, lib)
		spec.OpLibrary = torch.OpsLibraryName
		extra += "," + torch.OpsLibraryName
	}
	specJSON, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	cmd := fmt.Sprintf("torch-model-archiver --model-name %s --version 1.0 --serialized-file %s --handler %s --extra-files %s --config-file %s --export-path model-store --force",
		name, modelFile, TorchServeHandlerFile, extra, TorchServeModelConfig)
	script := "#!/bin/sh\n# Written by torchspeed export torchserve. Run in this folder; then:\n" +
		"#   torchserve --start --ncs --model-store model-store --models " + name + "=" + name + ".mar --ts-config " + TorchServeConfigProperty + "\n" +
		"set -e\nmkdir -p model-store\n" + cmd + "\n"
	e.ArchiverCommand = "cd " + dir + " && mkdir -p model-store && " + cmd
	files := []struct {
		name string
		data []byte
	}{
		{TorchServeHandlerFile, torchServeHandler},
		{TorchServeSpecFile, append(specJSON, '\n')},
		{TorchServeModelConfig, mcYAML},
		{TorchServeConfigProperty, []byte(propText.String())},
		{"archive.sh", []byte(script)},
	}
	if env != nil {
		// Workers inherit torchserve's environment.
		files = append(files, struct {
			name string
			data []byte
		}{RuntimeEnvFile, env})
		e.Notes = append(e.Notes, envNote+"; the workers inherit torchserve's environment")
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := safefile.WriteFile(p, f.data); err != nil {
			return nil, fmt.Errorf("export torchserve: write %s: %w", p, err)
		}
		e.Files = append(e.Files, p)
	}
	return e, nil
}

// keep names the files an export reads: the artifact and the others given.
func keep(artifact string, others []string) []safefile.Named {
	ins := []safefile.Named{{What: "the artifact", Path: artifact}}
	for _, p := range others {
		ins = append(ins, safefile.Named{What: "an input", Path: p})
	}
	return ins
}

// launcherArgs are TorchServe's cpu_launcher_args (torch.backends.xeon.run_cpu): each worker
// is pinned to the artifact's thread count in cores, keeps the GNU OpenMP that libtorch ships
// and torchspeed measured (the launcher would otherwise preload Intel's libiomp5 where it finds
// one), and uses the allocator the artifact was measured with. TorchServe appends
// --ninstances N --rank i only when a model has more than one worker; with one, run_cpu would
// start cores / ncores_per_instance copies of the worker. So the arguments say one instance,
// rank 0, which TorchServe's own (appended later: argparse keeps the last) replace.
func launcherArgs(threads int, allocator string) string {
	var args []string
	if threads > 0 {
		args = append(args, "--ncores_per_instance", strconv.Itoa(threads), "--ninstances", "1", "--rank", "0")
	}
	args = append(args, "--disable_iomp")
	switch allocator {
	case "jemalloc":
		args = append(args, "--enable_jemalloc")
	case "tcmalloc":
		args = append(args, "--enable_tcmalloc")
	default:
		args = append(args, "--use_default_allocator")
	}
	return strings.Join(args, " ")
}
