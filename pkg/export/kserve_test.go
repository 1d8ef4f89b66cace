package export

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/torchspeed/torchspeed/internal/schemacheck"
)

const (
	kserveRuntimeSchema = "kserve/kserve-servingruntimes-v1alpha1.schema.json"
	kserveServiceSchema = "kserve/kserve-inferenceservices-v1beta1.schema.json"
)

// yamlToJSON reads a YAML file as the API server would receive it.
func yamlToJSON(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// export kserve writes a ServingRuntime and an InferenceService that KServe's CRD schemas (with
// strict field validation) accept, whose settings are the manifest's: CPU = threads x
// instances, the measured environment, and the artifact itself as the model file.
func TestKServeExport(t *testing.T) {
	path, _ := artifact(t, "digits")
	a, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	a.Manifest.Runtime.Threads = 2
	a.Manifest.Runtime.Candidate, a.Manifest.Runtime.Allocator, a.Manifest.Runtime.WaitPolicy = "passive", "default", "PASSIVE"
	dir := t.TempDir()
	e, err := WriteKServe(a, dir, KServeOptions{Name: "digits", Instances: 3, StorageURI: "s3://models/digits", Machine: &big})
	if err != nil {
		t.Fatal(err)
	}
	rtPath, svcPath := filepath.Join(dir, KServeRuntimeFile), filepath.Join(dir, KServeServiceFile)
	if err := schemacheck.CheckCRD(kserveRuntimeSchema, yamlToJSON(t, rtPath)); err != nil {
		t.Error(err)
	}
	if err := schemacheck.CheckCRD(kserveServiceSchema, yamlToJSON(t, svcPath)); err != nil {
		t.Error(err)
	}
	var svc KServeService
	if err := json.Unmarshal(yamlToJSON(t, svcPath), &svc); err != nil {
		t.Fatal(err)
	}
	m := svc.Spec.Predictor.Model
	if m.Resources.Requests["cpu"] != "6" || m.Resources.Limits["cpu"] != "6" || e.CPUs != 6 {
		t.Errorf("cpu %v / %v, want 6 (2 threads x 3 instances)", m.Resources.Requests, m.Resources.Limits)
	}
	if mem := m.Resources.Limits["memory"]; !strings.HasSuffix(mem, "Mi") || e.MemoryBytes < 64<<20 {
		t.Errorf("memory %q (%d bytes): want a measured size in Mi", mem, e.MemoryBytes)
	}
	if !slices.Equal(m.Args, []string{"-m", "/mnt/models/digits.torchspeed.pt", "--instances", "3", "--threads", "2"}) {
		t.Errorf("args %q", m.Args)
	}
	if !slices.Contains(m.Env, kubeEnv{"OMP_WAIT_POLICY", "PASSIVE"}) {
		t.Errorf("env %v lacks the measured OMP_WAIT_POLICY=PASSIVE", m.Env)
	}
	if m.StorageURI != "s3://models/digits" || m.Runtime != KServeRuntimeName || m.ProtocolVersion != "v2" {
		t.Errorf("model %+v", m)
	}
	var rt KServeRuntime
	if err := json.Unmarshal(yamlToJSON(t, rtPath), &rt); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rt.Spec.ProtocolVersions, []string{"v2", "grpc-v2"}) || len(rt.Spec.Containers) != 1 ||
		!slices.Contains(rt.Spec.Containers[0].Args, "--grpc") || len(rt.Spec.Containers[0].Ports) != 2 {
		t.Errorf("runtime %+v", rt.Spec)
	}
	// The model file is the artifact, byte for byte: serve applies its load-time passes.
	want, _ := os.ReadFile(path)
	got, err := os.ReadFile(filepath.Join(dir, "digits.torchspeed.pt"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("model file differs from the artifact (%v)", err)
	}
	// A second export into the folder does not replace the first without Overwrite.
	if _, err := WriteKServe(a, dir, KServeOptions{Name: "digits", MemoryBytes: 1 << 30}); err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Errorf("second export: %v, want an error naming --overwrite", err)
	}
	e2, err := WriteKServe(a, dir, KServeOptions{Name: "digits", MemoryBytes: 1 << 30, Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if e2.Service.Spec.Predictor.Model.Resources.Limits["memory"] != "1024Mi" || !strings.Contains(strings.Join(e2.Notes, "\n"), "storageUri pvc://") {
		t.Errorf("defaults: %+v, notes %q", e2.Service.Spec.Predictor.Model.Resources, e2.Notes)
	}
}

// The schema check catches what Kubernetes would refuse or silently drop: a misspelt field, a
// CPU quantity that is not one, a missing required field.
func TestKServeSchemaCatches(t *testing.T) {
	svc := KServeService{APIVersion: "serving.kserve.io/v1beta1", Kind: "InferenceService", Metadata: kubeMeta{Name: "m"}}
	svc.Spec.Predictor.Model = kserveModel{ModelFormat: kserveModelFormat{Name: "torchspeed"}, Runtime: "torchspeed", ProtocolVersion: "v2",
		StorageURI: "s3://b/m", Args: []string{}, Resources: kubeResources{Requests: map[string]string{"cpu": "2"}, Limits: map[string]string{"cpu": "2"}}}
	good, _ := json.Marshal(svc)
	if err := schemacheck.CheckCRD(kserveServiceSchema, good); err != nil {
		t.Fatalf("a good InferenceService: %v", err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"misspelt field", `"storageUri"`, `"storageURI"`},
		{"bad quantity", `"cpu":"2"`, `"cpu":"two"`},
		{"args not a list", `"args":[]`, `"args":"-m x"`},
	} {
		bad := strings.Replace(string(good), tc.from, tc.to, 1)
		if bad == string(good) {
			t.Fatalf("%s: %s not in %s", tc.name, tc.from, good)
		}
		if err := schemacheck.CheckCRD(kserveServiceSchema, []byte(bad)); err == nil {
			t.Errorf("%s: the schema check let it through", tc.name)
		}
	}
	var rt KServeRuntime
	rt.APIVersion, rt.Kind, rt.Metadata.Name = "serving.kserve.io/v1alpha1", "ServingRuntime", "torchspeed"
	rt.Spec.SupportedModelFormats = []kserveModelFormat{{Name: "torchspeed"}}
	rt.Spec.ProtocolVersions = []string{"v2"}
	rt.Spec.Containers = []kubeContainer{{Name: "c", Image: "i", Args: []string{}, Ports: []kubePort{{Name: "h2c", ContainerPort: 9000, Protocol: "TCP"}}}}
	b, _ := json.Marshal(rt)
	if err := schemacheck.CheckCRD(kserveRuntimeSchema, b); err != nil {
		t.Fatalf("a good ServingRuntime: %v", err)
	}
	for _, bad := range []string{strings.Replace(string(b), `"containerPort"`, `"port"`, 1), strings.Replace(string(b), `"containerPort":9000`, `"containerPort":"9000"`, 1)} {
		if err := schemacheck.CheckCRD(kserveRuntimeSchema, []byte(bad)); err == nil {
			t.Errorf("the schema check let through %s", bad)
		}
	}
}

// Names Kubernetes does not take are refused before anything is written.
func TestKServeName(t *testing.T) {
	for _, n := range []string{"Digits", "1digits", "digits_int8", strings.Repeat("a", 46), "digits-"} {
		if err := checkKubeName(n); err == nil {
			t.Errorf("%q: accepted", n)
		}
	}
	if err := checkKubeName("digits-int8"); err != nil {
		t.Error(err)
	}
}
