package export

import (
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// The exported environment carries what the manifest's runtime candidate sets; libtorch's
// defaults (and a manifest from before runtimes were measured) write no file.
func TestRuntimeEnv(t *testing.T) {
	for _, rt := range []torchspeed.Runtime{{}, {Candidate: "default"}} {
		if b, note, err := RuntimeEnv(rt, "x.env"); b != nil || note != "" || err != nil {
			t.Errorf("%+v: %q %q %v", rt, b, note, err)
		}
	}
	b, note, err := RuntimeEnv(torchspeed.Runtime{Candidate: "thp+passive", Allocator: "default", HugePages: true, WaitPolicy: "PASSIVE", CPUCapability: "avx512"}, "m/torchspeed.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nOMP_WAIT_POLICY=PASSIVE\n", "\nGOMP_SPINCOUNT=0\n", "\nGLIBC_TUNABLES=glibc.malloc.hugetlb=1\n", "\nATEN_CPU_CAPABILITY=avx512\n", "--env-file m/torchspeed.env"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("env file lacks %q:\n%s", want, b)
		}
	}
	if !strings.Contains(note, "thp+passive") {
		t.Errorf("note %q", note)
	}
	b, _, err = RuntimeEnv(torchspeed.Runtime{Candidate: "jemalloc-thp", Allocator: "jemalloc", HugePages: true}, "e")
	if err != nil || !strings.Contains(string(b), "\nMALLOC_CONF=thp:always,metadata_thp:auto\n") || !strings.Contains(string(b), "# Allocator: jemalloc") || strings.Contains(string(b), "\nLD_PRELOAD=") {
		t.Errorf("jemalloc-thp: %v\n%s", err, b)
	}
	if _, _, err := RuntimeEnv(torchspeed.Runtime{Candidate: "x", CPUCapability: "avx9"}, "e"); err == nil {
		t.Error("a bad capability in a manifest: no error")
	}
	// OpenBLAS's forced kernels come with the CPU they need.
	b, _, err = RuntimeEnv(torchspeed.Runtime{Candidate: "openblas-avx512", Allocator: "default", BLASCore: "SkylakeX"}, "e")
	if err != nil || !strings.Contains(string(b), "\nOPENBLAS_CORETYPE=SkylakeX\n") || !strings.Contains(string(b), "AVX-512 F/BW/VL/DQ") {
		t.Errorf("openblas-avx512: %v\n%s", err, b)
	}
	if _, _, err := RuntimeEnv(torchspeed.Runtime{Candidate: "x", BLASCore: "Pentium9"}, "e"); err == nil {
		t.Error("a bad OpenBLAS core in a manifest: no error")
	}
}
