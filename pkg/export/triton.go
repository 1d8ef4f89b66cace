package export

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/export/tritonpb"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// Triton's PyTorch backend parameters (triton-inference-server/pytorch_backend README).
const (
	ParamIntraOpThreads     = "INTRA_OP_THREAD_COUNT"
	ParamInterOpThreads     = "INTER_OP_THREAD_COUNT"
	ParamInferenceMode      = "INFERENCE_MODE"
	ParamDisableOptimized   = "DISABLE_OPTIMIZED_EXECUTION"
	ParamEnableJITExecutor  = "ENABLE_JIT_EXECUTOR"
	ParamEnableJITProfiling = "ENABLE_JIT_PROFILING"
)

// TritonPlatform is the platform of TorchScript models in Triton.
const TritonPlatform = "pytorch_libtorch"

// DefaultMaxBatch is max_batch_size for a batchable model when the caller gives none. It caps
// what clients may send; without dynamic batching the server never forms batches itself.
const DefaultMaxBatch = 8

// TritonOptions adjust a Triton export.
type TritonOptions struct {
	// Name is the model's name in the repository (default: the artifact's file name without
	// .torchspeed.pt).
	Name string
	// MaxBatch is max_batch_size for a batchable model: 0 means DefaultMaxBatch, a negative
	// value turns batching off (max_batch_size 0, full shapes).
	MaxBatch int
	// Instances is the KIND_CPU instance count, as measured by `torchspeed bench --instances`
	// on the serving machine. 0 means 1 (the manifest holds no instance measurement).
	Instances int
	// Overwrite replaces an existing model directory's files.
	Overwrite bool
	// Machine is the CPU whose instruction sets the exported runtime environment may use (nil:
	// this machine's).
	Machine *runenv.Machine
	// Keep lists files besides the artifact that the export reads (the batch sweep report): no
	// file it writes may be one of them.
	Keep []string
	// BatchSweep is a `torchspeed bench --sweep-batch` result for the artifact (ReadBatchSweep);
	// with it, dynamic_batching is written when the sweep shows batching pays.
	BatchSweep *bench.SweepResult
	// StockOps serves the graph with libtorch's operators only: the load-time passes that call
	// torchspeed's operators are left out (a server that cannot load torch.OpsLibraryName).
	StockOps bool
	// Measure, when set, times model.pt as Triton loads it against torchspeed.Load (MeasureCost)
	// after writing it and before writing config.pbtxt; with Measure.Params the executor
	// parameters written are the measured choice. Without it they are the backend's defaults.
	Measure *CostOptions
}

// TritonExport is what WriteTriton wrote.
type TritonExport struct {
	ModelDir   string `json:"model_dir"`
	ConfigPath string `json:"config_path"`
	ModelPath  string `json:"model_path"`
	// EnvPath is RuntimeEnvFile, "" when the artifact runs with libtorch's defaults.
	EnvPath string `json:"env_path,omitempty"`
	// Config is the configuration written to ConfigPath.
	Config *tritonpb.ModelConfig `json:"-"`
	// OptimizedSaved: model.pt holds the graph after optimize_for_inference (libtorch could
	// save and reload it), not the artifact's bytes.
	OptimizedSaved bool `json:"optimized_saved"`
	// SavedPasses are the artifact's load-time passes whose result model.pt holds, and
	// SavedChannelsLast when its graph converts the inputs to channels-last itself.
	SavedPasses []string `json:"saved_passes"`
	// OpLibrary is the copy of torch.OpsLibraryName beside config.pbtxt when model.pt calls
	// torchspeed's operators ("" otherwise); EnvPath's LD_PRELOAD names it.
	OpLibrary string `json:"op_library,omitempty"`
	// Notes say what was left out or defaulted, and why.
	Notes []string `json:"notes"`
	// Cost is the measurement TritonOptions.Measure asked for (nil without it).
	Cost *Cost `json:"-"`
}

// extraSpace matches a field name at the start of a line and the spaces after its colon.
var extraSpace = regexp.MustCompile(`(?m)^( *[A-Za-z_][A-Za-z0-9_]*): +`)

var modelName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// DefaultName is the model name an export uses for path: its file name without extension.
func DefaultName(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".torchspeed.pt", ".pt", ".pth"} {
		if strings.HasSuffix(base, ext) && len(base) > len(ext) {
			return base[:len(base)-len(ext)]
		}
	}
	return base
}

// CheckName reports whether name can be a model name (it becomes a folder name), so a
// command can refuse a bad --name before any work.
func CheckName(name string) error { return checkName(name) }

func checkName(name string) error {
	if !modelName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("model name %q: use letters, digits, '_', '-' and '.' (it becomes a folder name)", name)
	}
	return nil
}

// TritonDataType maps a tensor element type to Triton's.
func TritonDataType(d torch.DType) (tritonpb.DataType, error) {
	switch d {
	case torch.Float32:
		return tritonpb.DataType_TYPE_FP32, nil
	case torch.Float64:
		return tritonpb.DataType_TYPE_FP64, nil
	case torch.Float16:
		return tritonpb.DataType_TYPE_FP16, nil
	case torch.BFloat16:
		return tritonpb.DataType_TYPE_BF16, nil
	case torch.Int64:
		return tritonpb.DataType_TYPE_INT64, nil
	case torch.Int32:
		return tritonpb.DataType_TYPE_INT32, nil
	case torch.Int16:
		return tritonpb.DataType_TYPE_INT16, nil
	case torch.Int8:
		return tritonpb.DataType_TYPE_INT8, nil
	case torch.Uint8:
		return tritonpb.DataType_TYPE_UINT8, nil
	case torch.Bool:
		return tritonpb.DataType_TYPE_BOOL, nil
	}
	return tritonpb.DataType_TYPE_INVALID, fmt.Errorf("dtype %s has no Triton data type: dequantize it in the model's forward", d)
}

// TritonConfig builds the model configuration for a: inputs INPUT__i and outputs OUTPUT__i
// (the naming every version of the PyTorch backend accepts) with the artifact's data types
// and shapes, the manifest's threads as backend parameters, and KIND_CPU instances.
func TritonConfig(a *Artifact, o TritonOptions) (*tritonpb.ModelConfig, []string, error) {
	name := o.Name
	if name == "" {
		name = DefaultName(a.Path)
	}
	if err := checkName(name); err != nil {
		return nil, nil, err
	}
	var notes []string
	cfg := &tritonpb.ModelConfig{Name: name, Platform: TritonPlatform}
	batch := a.Batchable && o.MaxBatch >= 0
	switch {
	case batch:
		cfg.MaxBatchSize = int32(o.MaxBatch)
		if o.MaxBatch == 0 {
			cfg.MaxBatchSize = DefaultMaxBatch
		}
	case !a.Batchable:
		notes = append(notes, "max_batch_size 0 (no batching): "+a.BatchNote)
	default:
		notes = append(notes, "max_batch_size 0: batching turned off by --max-batch")
	}
	dims := func(shape []int64) []int64 {
		if batch {
			return append([]int64{}, shape[1:]...)
		}
		return append([]int64{}, shape...)
	}
	for i, in := range a.Inputs {
		dt, err := TritonDataType(in.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		cfg.Input = append(cfg.Input, &tritonpb.ModelInput{Name: fmt.Sprintf("INPUT__%d", i), DataType: dt, Dims: dims(in.Shape)})
	}
	for i, out := range a.Outputs {
		idx, err := tupleIndex(out.Name)
		if err != nil || idx != i {
			return nil, nil, fmt.Errorf("output %q: Triton's PyTorch backend takes a tensor or a flat tuple of tensors from forward; make forward return a tuple (dicts and nested results are not served)", out.Name)
		}
		dt, err := TritonDataType(out.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("output %q: %w", out.Name, err)
		}
		if batch && len(out.Shape) == 0 {
			return nil, nil, fmt.Errorf("output %q is a scalar: a batched model must give one row per sample", out.Name)
		}
		cfg.Output = append(cfg.Output, &tritonpb.ModelOutput{Name: fmt.Sprintf("OUTPUT__%d", i), DataType: dt, Dims: dims(out.Shape)})
	}
	instances := o.Instances
	if instances <= 0 {
		instances = 1
		notes = append(notes, "instance_group count 1: the manifest records no instance measurement; measure with `torchspeed bench --instances N` on the serving machine and pass --instances")
	}
	cfg.InstanceGroup = []*tritonpb.ModelInstanceGroup{{Kind: tritonpb.ModelInstanceGroup_KIND_CPU, Count: int32(instances)}}
	cfg.Parameters = TritonParameters(a, nil)
	switch {
	case o.BatchSweep == nil:
		notes = append(notes, "dynamic_batching left out: the manifest records no throughput sweep over batch sizes, so nothing shows that batching pays for this model; pass --batch-sweep with a `torchspeed bench --sweep-batch --json` report")
	case !batch:
		notes = append(notes, "dynamic_batching left out: the model is exported without batching")
	default:
		db, why := DynamicBatching(o.BatchSweep, a.Manifest.Runtime.Threads)
		if db == nil {
			notes = append(notes, "dynamic_batching left out: "+why)
			break
		}
		cfg.SchedulingChoice = &tritonpb.ModelConfig_DynamicBatching{DynamicBatching: db}
		if p := db.PreferredBatchSize[0]; p > cfg.MaxBatchSize {
			cfg.MaxBatchSize = p
		}
		notes = append(notes, why)
	}
	if a.Manifest.QEngine != "" {
		notes = append(notes, fmt.Sprintf("INT8 artifact made for quantized engine %s: Triton's PyTorch backend does not set the engine; libtorch's default is %s here (on official 2.x builds it is x86)", a.Manifest.QEngine, orUnknown(a.DefaultQEngine)))
	}
	return cfg, notes, nil
}

// TritonParameters are the backend parameters carrying the runtime torchspeed measured: the
// manifest's thread counts, and the executor settings of choice (measured on the served
// model), or without one the backend's defaults (optimized execution, the profiling JIT
// executor, InferenceMode), which every torchspeed measurement ran with.
func TritonParameters(a *Artifact, choice *ParamChoice) map[string]*tritonpb.ModelParameter {
	exec := TritonSettings()[0].Params()
	if choice != nil {
		exec = choice.Params()
	}
	p := map[string]*tritonpb.ModelParameter{}
	for k, v := range exec {
		p[k] = &tritonpb.ModelParameter{StringValue: v}
	}
	if n := a.Manifest.Runtime.Threads; n > 0 {
		p[ParamIntraOpThreads] = &tritonpb.ModelParameter{StringValue: strconv.Itoa(n)}
	}
	if n := a.Manifest.Runtime.InteropThreads; n > 0 {
		p[ParamInterOpThreads] = &tritonpb.ModelParameter{StringValue: strconv.Itoa(n)}
	}
	return p
}

// MarshalTritonConfig writes cfg in Triton's text format.
func MarshalTritonConfig(cfg *tritonpb.ModelConfig) ([]byte, error) {
	b, err := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode config.pbtxt: %w", err)
	}
	// prototext adds a random extra space after some field names, on purpose, so that nobody
	// depends on its bytes; a config under version control should not change between builds.
	b = extraSpace.ReplaceAll(b, []byte("$1: "))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	return b, nil
}

// ReadTritonConfig parses a config.pbtxt. Fields outside torchspeed's schema are an error,
// since nothing torchspeed writes has them.
func ReadTritonConfig(path string) (*tritonpb.ModelConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg tritonpb.ModelConfig
	if err := prototext.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &cfg, nil
}

// WriteTriton writes a Triton model repository entry for a: REPO/NAME/1/model.pt (the
// artifact, byte for byte) and REPO/NAME/config.pbtxt.
func WriteTriton(a *Artifact, repo string, o TritonOptions) (*TritonExport, error) {
	cfg, notes, err := TritonConfig(a, o)
	if err != nil {
		return nil, fmt.Errorf("export triton %q: %w", a.Path, err)
	}
	dir := filepath.Join(repo, cfg.Name)
	e := &TritonExport{
		ModelDir: dir, ConfigPath: filepath.Join(dir, "config.pbtxt"),
		ModelPath: filepath.Join(dir, "1", "model.pt"), Config: cfg, Notes: notes,
	}
	unlock, err := claimTritonEntry(a, e, o)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// model.pt is written beside its final name and measured there: a failed measurement
	// leaves no new file, and an earlier export's files stay as they were. The name is this
	// export's own, so an export that lost the lock (a killed holder) cannot remove it.
	f, err := os.CreateTemp(filepath.Dir(e.ModelPath), ".model.pt.export-*")
	if err != nil {
		return nil, fmt.Errorf("export triton: %w", err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	opsLib, stock, why := opsLibrary(a, o.StockOps)
	if why != "" {
		e.Notes = append(e.Notes, why)
	}
	sm, err := writeServedModel(a, tmp, stock)
	if err != nil {
		return nil, fmt.Errorf("export triton: %w", err)
	}
	e.OptimizedSaved, e.SavedPasses = sm.saved(), sm.passes
	if sm.note != "" {
		e.Notes = append(e.Notes, strings.ReplaceAll(sm.note, filepath.Base(tmp), filepath.Base(e.ModelPath)))
	}
	text, err := tritonConfigText(a, e, tmp, o.Measure)
	if err != nil {
		return nil, fmt.Errorf("export triton: %w", err)
	}
	if err := os.Rename(tmp, e.ModelPath); err != nil {
		return nil, fmt.Errorf("export triton: %w", err)
	}
	if err := writeTritonEnv(a, e, o, opsLib, sm.ops); err != nil {
		os.Remove(e.ModelPath)
		return nil, err
	}
	if err := safefile.WriteFile(e.ConfigPath, text); err != nil {
		// No half-written repository entry: model.pt goes with the config it needs.
		os.Remove(e.ModelPath)
		if e.EnvPath != "" {
			os.Remove(e.EnvPath)
		}
		if e.OpLibrary != "" {
			os.Remove(e.OpLibrary)
		}
		return nil, fmt.Errorf("export triton: write %s: %w", e.ConfigPath, err)
	}
	return e, nil
}

// claimTritonEntry checks e's files against the inputs, creates the entry's folders and takes
// the entry's lock (the returned func releases it); without Overwrite, existing files are an error.
func claimTritonEntry(a *Artifact, e *TritonExport, o TritonOptions) (func(), error) {
	dir := e.ModelDir
	outs := []safefile.Named{{What: "config.pbtxt", Path: e.ConfigPath}, {What: "model.pt", Path: e.ModelPath},
		{What: RuntimeEnvFile, Path: filepath.Join(dir, RuntimeEnvFile)}, {What: torch.OpsLibraryName, Path: filepath.Join(dir, torch.OpsLibraryName)}}
	if err := safefile.CheckNotInput(outs, keep(a.Path, o.Keep)); err != nil {
		return nil, tserr.BadInput(fmt.Errorf("export triton: %w", err))
	}
	if err := os.MkdirAll(filepath.Dir(e.ModelPath), 0o777); err != nil {
		return nil, fmt.Errorf("export triton: create %s: %w", filepath.Dir(e.ModelPath), err)
	}
	// Two exports into one entry take turns: the second then finds the first's files (or, with
	// Overwrite, replaces them whole), and never model.pt of one beside config.pbtxt of the other.
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("export triton: %w", err)
	}
	if !o.Overwrite {
		for _, p := range []string{e.ConfigPath, e.ModelPath, filepath.Join(dir, torch.OpsLibraryName)} {
			if _, err := os.Stat(p); err == nil {
				unlock()
				return nil, fmt.Errorf("export triton: %s exists: pass --overwrite to replace it, or choose another --name", p)
			}
		}
	}
	return unlock, nil
}

// writeTritonEnv writes the entry's torchspeed.env (the measured runtime environment, and the
// LD_PRELOAD of the op library copied beside the model when the served graph calls its
// operators). On an error it leaves neither file.
func writeTritonEnv(a *Artifact, e *TritonExport, o TritonOptions, opsLib string, ops bool) error {
	dir := e.ModelDir
	env, note, envWarnings, err := RuntimeEnv(a.Manifest.Runtime, filepath.Join(dir, RuntimeEnvFile), machineOr(o.Machine), a.Manifest.CPU.Name())
	e.Notes = append(e.Notes, warningNotes(envWarnings)...)
	if err != nil {
		return fmt.Errorf("export triton: %w", err)
	}
	if ops {
		lib, err := filepath.Abs(filepath.Join(dir, torch.OpsLibraryName))
		if err == nil {
			err = copyFile(opsLib, lib)
		}
		if err != nil {
			return fmt.Errorf("export triton: %w", err)
		}
		e.OpLibrary = lib
		env = withOpsPreload(env, lib)
		note = fmt.Sprintf("LD_PRELOAD of %s in %s", torch.OpsLibraryName, filepath.Join(dir, RuntimeEnvFile))
		if a.Manifest.Runtime.Candidate != "" && a.Manifest.Runtime.Candidate != runenv.DefaultCandidate {
			note = fmt.Sprintf("runtime environment (candidate %s) and the %s", a.Manifest.Runtime.Candidate, note)
		}
		note += ": give it to tritonserver's process (docker run --env-file, systemd EnvironmentFile=)"
	}
	if env == nil {
		return nil
	}
	// Triton's PyTorch backend runs in the tritonserver process: its environment is the model's.
	e.EnvPath = filepath.Join(dir, RuntimeEnvFile)
	if err := safefile.WriteFile(e.EnvPath, env); err != nil {
		if e.OpLibrary != "" {
			os.Remove(e.OpLibrary)
		}
		return fmt.Errorf("export triton: write %s: %w", e.EnvPath, err)
	}
	e.Notes = append(e.Notes, note+"; tritonserver runs every model in one process, so it applies to all of them")
	return nil
}

// tritonConfigText measures the served model (at served) when asked, sets the executor
// parameters from the measurement, and returns config.pbtxt's text.
func tritonConfigText(a *Artifact, e *TritonExport, served string, measure *CostOptions) ([]byte, error) {
	if measure == nil {
		e.Notes = append(e.Notes, "executor parameters (INFERENCE_MODE, DISABLE_OPTIMIZED_EXECUTION, ENABLE_JIT_EXECUTOR, ENABLE_JIT_PROFILING) are the backend's defaults: not measured")
		return MarshalTritonConfig(e.Config)
	}
	o := *measure
	o.Server = "Triton"
	c, err := MeasureCost(a, served, e.SavedPasses, o)
	if err != nil {
		return nil, err
	}
	e.Cost = c
	if c.Params == nil {
		e.Notes = append(e.Notes, "executor parameters are the backend's defaults: not measured (--measure-params=false)")
	} else {
		e.Config.Parameters = TritonParameters(a, c.Params)
		e.Notes = append(e.Notes, "executor parameters: "+c.Params.Chosen+": "+c.Params.Why)
	}
	return MarshalTritonConfig(e.Config)
}

// opsLibrary is torch.OpsLibraryName to ship with a's served model, when its served graph may
// call torchspeed's operators (mayCallOps) and stockOps is off. stock is true (serve libtorch's
// operators only, and the served graph as before) with stockOps, or with why saying so when the
// library was wanted but is missing. An artifact whose served graph calls no torchspeed operator
// gets no library and stock false: its graph may still hold what needs none (the channels-last
// input conversion).
func opsLibrary(a *Artifact, stockOps bool) (lib string, stock bool, why string) {
	if stockOps {
		return "", true, ""
	}
	if !mayCallOps(a.Manifest) {
		return "", false, ""
	}
	lib, err := torch.OpsLibraryPath()
	if err != nil {
		return "", true, "served with libtorch's operators only: " + err.Error()
	}
	return lib, false, ""
}

// mayCallOps says whether the served graph of an artifact with manifest m may call torchspeed's
// operators: it has passes that do, or an optimize_for_inference graph that this build saves
// with torchspeed's serializable oneDNN constants (a CNN's, with libtorch 1.13).
func mayCallOps(m *torchspeed.Manifest) bool {
	if slices.ContainsFunc(m.LoadPasses, func(p string) bool { return slices.Contains(opPasses, p) }) {
		return true
	}
	return slices.Contains(m.LoadPasses, torchspeed.PassOptimizeForInference) && torch.MKLDNNServeUnavailable() == ""
}

// lockDir takes an exclusive flock on the folder dir itself (no lock file left behind); the
// kernel releases it if the process dies.
func lockDir(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() {
		syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		d.Close()
	}, nil
}

// copyFile copies src to dst atomically (dst appears whole or not at all).
func copyFile(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := safefile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
