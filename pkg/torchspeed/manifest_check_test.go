package torchspeed

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// Every runtime candidate optimize can measure (and write into a manifest) on any machine is one
// the manifest check accepts: a candidate added to pkg/runenv without a name here would make
// its artifacts unloadable.
func TestManifestCheckKnowsEveryCandidate(t *testing.T) {
	m := runenv.Machine{THP: "always", Glibc: "2.36", AVX512: true, CPUCapability: "AVX2",
		OpenBLAS: "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"}
	seen := 0
	for _, openmp := range []string{"gnu", "intel", "llvm"} {
		cands := runenv.Candidates(runenv.Settings{Threads: 2, OpenMP: openmp}, m, nil)
		// optimize combines the winners of different kinds ("thp+avx512"), up to one per kind.
		all := slices.Clone(cands)
		for _, a := range cands {
			for _, b := range cands {
				if ab, ok := runenv.Combine(a, b); ok {
					all = append(all, ab)
					for _, c := range cands {
						if abc, ok := runenv.Combine(ab, c); ok {
							all = append(all, abc)
						}
					}
				}
			}
		}
		for _, c := range all {
			man := Manifest{Format: 1, Runtime: Runtime{Threads: 2, OpenMP: openmp, Candidate: c.Name, WaitPolicy: c.WaitPolicy,
				SpinCount: c.SpinCount, Allocator: c.Allocator, HugePages: c.HugePages, CPUCapability: c.CPUCapability, BLASCore: c.BLASCore}}
			if err := checkManifest(&man); err != nil {
				t.Errorf("candidate %+v: %v", c, err)
			}
			seen++
		}
	}
	if seen < 6 {
		t.Errorf("only %d candidates offered: the machine above no longer enables them all", seen)
	}
}

func TestManifestCheck(t *testing.T) {
	good := func() *Manifest {
		batch := -1
		return &Manifest{Format: 1, Torchspeed: "v1.2.3", Libtorch: "1.13.1", SourceName: "resnet 18.pt",
			SourceSHA256: strings.Repeat("0f", 32), Precision: "int8-static", QEngine: "onednn",
			Inputs:     []InputSpec{{Name: "x", Shape: []int64{1, 3, 224, 224}, DType: "float32"}, {Name: "sr", Type: "int", Value: []byte("16000"), BatchDim: &batch}},
			LoadPasses: []string{PassFreeze, PassFastQDQ}, Method: "forward", ResetMethod: "reset_state", StateAttributes: []string{"enc.h0", "c"},
			QuantizedOps: map[string]int{"quantized::conv2d": 3}, Validation: map[string]float64{"cosine": 0.999},
			Runtime: Runtime{Threads: 3000, InteropThreads: 1, OpenMP: "gnu", Allocator: "jemalloc", Candidate: "passive-short-spin",
				WaitPolicy: "PASSIVE", SpinCount: 3000, CPUCapability: "avx512", BLASCore: "SkylakeX"}}
	}
	if err := checkManifest(good()); err != nil {
		t.Fatalf("a manifest torchspeed writes: %v", err)
	}
	combined := good()
	combined.Runtime.Candidate = "thp+avx512+passive"
	if err := checkManifest(combined); err != nil {
		t.Fatalf("a manifest torchspeed writes: %v", err)
	}
	cases := []struct {
		field string
		edit  func(*Manifest)
	}{
		{"runtime.candidate", func(m *Manifest) { m.Runtime.Candidate = "passive\ntouch /tmp/x" }},
		{"runtime.candidate", func(m *Manifest) { m.Runtime.Candidate = "turbo" }},
		{"runtime.candidate", func(m *Manifest) { m.Runtime.Candidate = "thp+" }},
		{"runtime.candidate", func(m *Manifest) { m.Runtime.Candidate = "thp+avx512+passive+jemalloc+active" }},
		{"runtime.wait_policy", func(m *Manifest) { m.Runtime.WaitPolicy = "passive" }},
		{"runtime.allocator", func(m *Manifest) { m.Runtime.Allocator = "/tmp/evil.so" }},
		{"runtime.openmp", func(m *Manifest) { m.Runtime.OpenMP = "gnu; rm -rf ~" }},
		{"runtime.cpu_capability", func(m *Manifest) { m.Runtime.CPUCapability = "avx1024" }},
		{"runtime.blas_core", func(m *Manifest) { m.Runtime.BLASCore = "$(id)" }},
		{"runtime.threads", func(m *Manifest) { m.Runtime.Threads = -1 }},
		{"runtime.threads", func(m *Manifest) { m.Runtime.Threads = MaxManifestThreads + 1 }},
		{"runtime.interop_threads", func(m *Manifest) { m.Runtime.InteropThreads = -2 }},
		{"runtime.spin_count", func(m *Manifest) { m.Runtime.SpinCount = -5 }},
		{"qengine", func(m *Manifest) { m.QEngine = "fast" }},
		{"torchspeed_version", func(m *Manifest) { m.Torchspeed = "1\x1b[2J" }},
		{"libtorch_version", func(m *Manifest) { m.Libtorch = strings.Repeat("1", MaxManifestName+1) }},
		{"source_name", func(m *Manifest) { m.SourceName = "a\u2028b" }},
		{"source_name", func(m *Manifest) { m.SourceName = "\xff\xfe" }},
		{"source_sha256", func(m *Manifest) { m.SourceSHA256 = "abc" }},
		{"records_sha256", func(m *Manifest) { m.RecordsSHA256 = strings.Repeat("g", 64) }},
		{"precision", func(m *Manifest) { m.Precision = "fp32\x00" }},
		{"inputs[0].name", func(m *Manifest) { m.Inputs[0].Name = "x\ny" }},
		{"inputs[0].dtype", func(m *Manifest) { m.Inputs[0].DType = "float128" }},
		{"inputs[0].shape", func(m *Manifest) { m.Inputs[0].Shape = make([]int64, 65) }},
		{"inputs[1].batch_dim", func(m *Manifest) { b := 1 << 40; m.Inputs[1].BatchDim = &b }},
		{"inputs[1].value", func(m *Manifest) { m.Inputs[1].Value = []byte(`"` + strings.Repeat("v", MaxManifestString) + `"`) }},
		{"inputs", func(m *Manifest) { m.Inputs = make([]InputSpec, MaxManifestList+1) }},
		{"load_passes[1]", func(m *Manifest) { m.LoadPasses[1] = "fast\rqdq" }},
		{"method", func(m *Manifest) { m.Method = "forward()" }},
		{"reset_method", func(m *Manifest) { m.ResetMethod = "1reset" }},
		{"state_attributes[0]", func(m *Manifest) { m.StateAttributes[0] = "enc..h0" }},
		{"preserve_methods[0]", func(m *Manifest) { m.PreserveMethods = []string{"a b"} }},
		{"quantized_ops.quantized::conv2d", func(m *Manifest) { m.QuantizedOps["quantized::conv2d"] = -1 }},
		{"validation key", func(m *Manifest) { m.Validation["a\nb"] = 1 }},
	}
	for _, c := range cases {
		m := good()
		c.edit(m)
		err := checkManifest(m)
		var me *ManifestError
		if !errors.As(err, &me) || me.Field != c.field {
			t.Errorf("%s: got %v", c.field, err)
			continue
		}
		msg := err.Error()
		if len(msg) > 1000 || strings.ContainsAny(msg, "\n\r\x00\x1b\u2028") {
			t.Errorf("%s: message %q", c.field, msg)
		}
	}
}

// ParseManifest names the field of a value of the wrong JSON type, and a time that is none.
func TestParseManifestTypes(t *testing.T) {
	for raw, field := range map[string]string{
		`{"format": 1, "runtime": {"threads": "2"}}`:     "runtime.threads",
		`{"format": 1, "runtime": {"candidate": 3}}`:     "runtime.candidate",
		`{"format": 1, "inputs": [{"shape": ["1"]}]}`:    "inputs.shape",
		`{"format": 1, "created": "yesterday\ntouch x"}`: "created",
	} {
		_, err := ParseManifest([]byte(raw))
		var me *ManifestError
		if !errors.As(err, &me) || me.Field != field {
			t.Errorf("%s: got %v, want field %s", raw, err, field)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: message %q", raw, err)
		}
	}
}
