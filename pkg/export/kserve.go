package export

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// KServe file names in the export folder, and the ports `torchspeed serve` listens on in the
// container (KServe's HTTP port; gRPC on Triton runtime's 9000).
const (
	KServeRuntimeFile = "servingruntime.yaml"
	KServeServiceFile = "inferenceservice.yaml"
	KServeRuntimeName = "torchspeed"
	KServeHTTPPort    = 8080
	KServeGRPCPort    = 9000
	// KServeModelFormat is the modelFormat name the runtime supports and the service asks for.
	KServeModelFormat = "torchspeed"
	// DefaultKServeImage is the image docker/Dockerfile builds (entrypoint torchspeed).
	DefaultKServeImage = "torchspeed:latest"
)

// KServeOptions adjust a KServe export.
type KServeOptions struct {
	// Name is the InferenceService's and the model's name (default: the artifact's file name
	// without .torchspeed.pt).
	Name string
	// Instances is how many instances `torchspeed serve` runs, as measured with `torchspeed
	// bench --instances`; 0 means 1.
	Instances int
	// Image is the container image with torchspeed (default DefaultKServeImage).
	Image string
	// StorageURI is where KServe fetches the folder holding NAME.torchspeed.pt from (gs://,
	// s3://, pvc://, https://; default: a pvc:// placeholder to replace).
	StorageURI string
	// MemoryBytes is the container's memory request and limit; 0: measured (MeasureMemory).
	MemoryBytes int64
	Overwrite   bool
	Machine     *runenv.Machine
	Keep        []string
	BatchSweep  *bench.SweepResult
}

// The Kubernetes objects written, with the fields torchspeed sets.
type (
	// KServeRuntime is a serving.kserve.io/v1alpha1 ServingRuntime.
	KServeRuntime struct {
		APIVersion string            `yaml:"apiVersion" json:"apiVersion"`
		Kind       string            `yaml:"kind" json:"kind"`
		Metadata   kubeMeta          `yaml:"metadata" json:"metadata"`
		Spec       KServeRuntimeSpec `yaml:"spec" json:"spec"`
	}
	// KServeRuntimeSpec is the ServingRuntime's spec.
	KServeRuntimeSpec struct {
		Annotations           map[string]string   `yaml:"annotations,omitempty" json:"annotations,omitempty"`
		SupportedModelFormats []kserveModelFormat `yaml:"supportedModelFormats" json:"supportedModelFormats"`
		ProtocolVersions      []string            `yaml:"protocolVersions" json:"protocolVersions"`
		MultiModel            bool                `yaml:"multiModel" json:"multiModel"`
		Containers            []kubeContainer     `yaml:"containers" json:"containers"`
	}
	// KServeService is a serving.kserve.io/v1beta1 InferenceService.
	KServeService struct {
		APIVersion string   `yaml:"apiVersion" json:"apiVersion"`
		Kind       string   `yaml:"kind" json:"kind"`
		Metadata   kubeMeta `yaml:"metadata" json:"metadata"`
		Spec       struct {
			Predictor struct {
				MinReplicas *int        `yaml:"minReplicas,omitempty" json:"minReplicas,omitempty"`
				Model       kserveModel `yaml:"model" json:"model"`
			} `yaml:"predictor" json:"predictor"`
		} `yaml:"spec" json:"spec"`
	}
	kubeMeta struct {
		Name        string            `yaml:"name" json:"name"`
		Annotations map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
	}
	kserveModelFormat struct {
		Name       string `yaml:"name" json:"name"`
		Version    string `yaml:"version,omitempty" json:"version,omitempty"`
		AutoSelect bool   `yaml:"autoSelect,omitempty" json:"autoSelect,omitempty"`
	}
	kubeContainer struct {
		Name  string     `yaml:"name" json:"name"`
		Image string     `yaml:"image" json:"image"`
		Args  []string   `yaml:"args" json:"args"`
		Ports []kubePort `yaml:"ports,omitempty" json:"ports,omitempty"`
	}
	kubePort struct {
		Name          string `yaml:"name" json:"name"`
		ContainerPort int    `yaml:"containerPort" json:"containerPort"`
		Protocol      string `yaml:"protocol" json:"protocol"`
	}
	kserveModel struct {
		ModelFormat     kserveModelFormat `yaml:"modelFormat" json:"modelFormat"`
		Runtime         string            `yaml:"runtime" json:"runtime"`
		ProtocolVersion string            `yaml:"protocolVersion" json:"protocolVersion"`
		StorageURI      string            `yaml:"storageUri" json:"storageUri"`
		Args            []string          `yaml:"args" json:"args"`
		Env             []kubeEnv         `yaml:"env,omitempty" json:"env,omitempty"`
		Resources       kubeResources     `yaml:"resources" json:"resources"`
	}
	kubeEnv struct {
		Name  string `yaml:"name" json:"name"`
		Value string `yaml:"value" json:"value"`
	}
	kubeResources struct {
		Requests map[string]string `yaml:"requests" json:"requests"`
		Limits   map[string]string `yaml:"limits" json:"limits"`
	}
)

// KServeExport is what WriteKServe wrote.
type KServeExport struct {
	Dir         string        `json:"dir"`
	Files       []string      `json:"files"`
	Runtime     KServeRuntime `json:"serving_runtime"`
	Service     KServeService `json:"inference_service"`
	CPUs        int           `json:"cpus"`
	MemoryBytes int64         `json:"memory_bytes"`
	Notes       []string      `json:"notes"`
}

// WriteKServe writes into dir what KServe needs to run a with `torchspeed serve`: the artifact
// as NAME.torchspeed.pt (byte for byte: serve loads it with torchspeed's loader, load-time
// passes included), a ServingRuntime for torchspeed serve (REST on 8080, gRPC on 9000, Open
// Inference Protocol v2) and an InferenceService whose CPU request and limit are the
// artifact's threads times the instances, with the runtime environment it was measured with.
func WriteKServe(a *Artifact, dir string, o KServeOptions) (*KServeExport, error) {
	name := o.Name
	if name == "" {
		// Kubernetes names take neither capitals nor '_'.
		name = strings.ReplaceAll(strings.ToLower(DefaultName(a.Path)), "_", "-")
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("export kserve %q: %w", a.Path, err)
	}
	if err := checkKubeName(name); err != nil {
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("export kserve %q: %w", a.Path, err))
	}
	var notes []string
	instances := o.Instances
	if instances <= 0 {
		instances = 1
		notes = append(notes, "1 instance: the manifest records no instance measurement; measure with `torchspeed bench --instances N` on the serving machine and pass --instances")
	}
	threads := a.Manifest.Runtime.Threads
	if threads <= 0 {
		threads = 1
		notes = append(notes, "1 thread per instance: the manifest records no measured thread count")
	}
	cpus := threads * instances
	mem := o.MemoryBytes
	if mem <= 0 {
		var err error
		if mem, err = MeasureMemory(); err != nil {
			return nil, fmt.Errorf("export kserve: %w", err)
		}
		notes = append(notes, fmt.Sprintf("memory %s: this process's peak resident memory after loading and running the artifact, and half again for headroom; pass --memory to set it", quantity(mem)))
	}
	image := o.Image
	if image == "" {
		image = DefaultKServeImage
		notes = append(notes, "image "+DefaultKServeImage+": build it with docker/Dockerfile and push it where the cluster pulls from, then pass --image")
	}
	storage := o.StorageURI
	if storage == "" {
		storage = "pvc://torchspeed-models/" + name
		notes = append(notes, fmt.Sprintf("storageUri %s is a placeholder: copy %s.torchspeed.pt to a bucket or volume KServe can read and pass --storage-uri", storage, name))
	}
	modelFile := name + ".torchspeed.pt"
	args := []string{"-m", "/mnt/models/" + modelFile, "--instances", strconv.Itoa(instances), "--threads", strconv.Itoa(threads)}
	switch {
	case o.BatchSweep == nil:
	case !a.Batchable:
		notes = append(notes, "no dynamic batching: the model is not batchable")
	default:
		db, why := DynamicBatching(o.BatchSweep, threads)
		if db == nil {
			notes = append(notes, "no dynamic batching: "+why)
			break
		}
		args = append(args, "--max-batch", strconv.Itoa(int(db.PreferredBatchSize[0])), "--batch-delay", fmt.Sprintf("%dus", db.MaxQueueDelayMicroseconds))
		notes = append(notes, why)
	}

	rt := KServeRuntime{APIVersion: "serving.kserve.io/v1alpha1", Kind: "ServingRuntime", Metadata: kubeMeta{Name: KServeRuntimeName}}
	rt.Spec = KServeRuntimeSpec{
		Annotations:           map[string]string{"prometheus.kserve.io/port": strconv.Itoa(KServeHTTPPort), "prometheus.kserve.io/path": "/metrics"},
		SupportedModelFormats: []kserveModelFormat{{Name: KServeModelFormat, Version: "1", AutoSelect: true}},
		ProtocolVersions:      []string{"v2", "grpc-v2"},
		Containers: []kubeContainer{{
			Name: "kserve-container", Image: image,
			Args: []string{"serve", "--name", "{{.Name}}", "--http", fmt.Sprintf("0.0.0.0:%d", KServeHTTPPort), "--grpc", fmt.Sprintf("0.0.0.0:%d", KServeGRPCPort)},
			Ports: []kubePort{
				{Name: "http1", ContainerPort: KServeHTTPPort, Protocol: "TCP"},
				{Name: "h2c", ContainerPort: KServeGRPCPort, Protocol: "TCP"},
			},
		}},
	}
	var svc KServeService
	svc.APIVersion, svc.Kind = "serving.kserve.io/v1beta1", "InferenceService"
	// Two ports in one container (REST and gRPC) need KServe's raw deployment: Knative serves
	// one port per container.
	svc.Metadata = kubeMeta{Name: name, Annotations: map[string]string{"serving.kserve.io/deploymentMode": "RawDeployment"}}
	one := 1
	svc.Spec.Predictor.MinReplicas = &one
	res := map[string]string{"cpu": strconv.Itoa(cpus), "memory": quantity(mem)}
	svc.Spec.Predictor.Model = kserveModel{
		ModelFormat: kserveModelFormat{Name: KServeModelFormat, Version: "1"}, Runtime: KServeRuntimeName, ProtocolVersion: "v2",
		StorageURI: storage, Args: args,
		Resources: kubeResources{Requests: res, Limits: res},
	}
	env, _, envWarnings, err := RuntimeEnv(a.Manifest.Runtime, RuntimeEnvFile, machineOr(o.Machine), a.Manifest.CPU.Name())
	notes = append(notes, warningNotes(envWarnings)...)
	if err != nil {
		return nil, fmt.Errorf("export kserve: %w", err)
	}
	if env != nil {
		vars := envVars(env)
		// The allocator is preloaded from where docker/Dockerfile's Ubuntu packages put it; an
		// image without it at that path runs with glibc's (ld.so warns and goes on).
		if lib, ok := map[string]string{"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc.so.4"}[a.Manifest.Runtime.Allocator]; ok {
			p := "/usr/lib/x86_64-linux-gnu/" + lib
			vars = append(vars, kubeEnv{Name: "LD_PRELOAD", Value: p})
			notes = append(notes, fmt.Sprintf("allocator %s: LD_PRELOAD=%s, where docker/Dockerfile's image has it; change it for an image that keeps it elsewhere", a.Manifest.Runtime.Allocator, p))
		}
		svc.Spec.Predictor.Model.Env = vars
		notes = append(notes, fmt.Sprintf("runtime environment of candidate %s in the InferenceService's env", a.Manifest.Runtime.Candidate))
	}
	rtYAML, err := yaml.Marshal(rt)
	if err != nil {
		return nil, err
	}
	svcYAML, err := yaml.Marshal(svc)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# Written by torchspeed %s export kserve for %s.\n", version.Version, filepath.Base(a.Path))
	e := &KServeExport{Dir: dir, Runtime: rt, Service: svc, CPUs: cpus, MemoryBytes: mem, Notes: notes}
	files := []struct {
		name string
		data []byte
	}{
		{KServeRuntimeFile, append([]byte(head+"# One runtime serves every torchspeed artifact; each InferenceService carries its own settings.\n"), rtYAML...)},
		{KServeServiceFile, append([]byte(head+"# CPU = threads per instance x instances, as measured; env = the runtime environment measured fastest.\n"), svcYAML...)},
	}
	var outs []safefile.Named
	for _, f := range []string{modelFile, KServeRuntimeFile, KServeServiceFile} {
		outs = append(outs, safefile.Named{What: f, Path: filepath.Join(dir, f)})
	}
	if err := safefile.CheckNotInput(outs, keep(a.Path, o.Keep)); err != nil {
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("export kserve: %w", err))
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("export kserve: create %s: %w", dir, err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("export kserve: %w", err)
	}
	defer unlock()
	if !o.Overwrite {
		for _, f := range []string{modelFile, KServeRuntimeFile, KServeServiceFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return nil, fmt.Errorf("export kserve: %s exists: pass --overwrite to replace it, or choose another -o", filepath.Join(dir, f))
			}
		}
	}
	p := filepath.Join(dir, modelFile)
	if err := copyFile(a.Path, p); err != nil {
		return nil, fmt.Errorf("export kserve: %w", err)
	}
	e.Files = append(e.Files, p)
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := safefile.WriteFile(p, f.data); err != nil {
			return nil, fmt.Errorf("export kserve: write %s: %w", p, err)
		}
		e.Files = append(e.Files, p)
	}
	return e, nil
}

// checkKubeName refuses names Kubernetes does not take for an InferenceService (a DNS-1035
// label: lower-case letters, digits and '-', starting with a letter, at most 63 characters,
// less the room KServe's suffixes take).
func checkKubeName(name string) error {
	const max = 45 // KServe appends "-predictor-00001-deployment"-like suffixes
	ok := len(name) > 0 && len(name) <= max && name[0] >= 'a' && name[0] <= 'z' && name[len(name)-1] != '-'
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("name %q is not a Kubernetes resource name: use lower-case letters, digits and '-', starting with a letter, at most %d characters (--name)", name, max)
	}
	return nil
}

// envVars reads NAME=VALUE lines of a RuntimeEnv text, skipping its comments.
func envVars(text []byte) []kubeEnv {
	var vars []kubeEnv
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			vars = append(vars, kubeEnv{Name: k, Value: v})
		}
	}
	return vars
}

// quantity writes bytes as a Kubernetes quantity in whole mebibytes.
func quantity(b int64) string {
	return strconv.FormatInt((b+(1<<20)-1)>>20, 10) + "Mi"
}

// MeasureMemory is a memory size for a server of the artifact Inspect loaded and ran in this
// process: the peak resident memory so far (libtorch, the model, one run's buffers) and half
// again for headroom, rounded up to 64 MiB. Instances share the model's weights (sessions of a
// stateless model do not copy them).
func MeasureMemory() (int64, error) {
	peak, err := procStatusBytes("VmHWM")
	if err != nil {
		return 0, fmt.Errorf("measuring memory: %w; pass --memory", err)
	}
	need := peak + peak/2
	const step = 64 << 20
	return (need + step - 1) / step * step, nil
}

func procStatusBytes(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/self/status %s: %q", field, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/self/status has no %s", field)
}
