package export

import (
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// big can run every setting; zen3 is an AVX2 server without huge pages for glibc.
var (
	big  = runenv.Machine{AVX2: true, AVX512: true, BF16: true, THP: "always", Glibc: "2.36", Name: "AMD EPYC 9B45"}
	zen3 = runenv.Machine{AVX2: true, THP: "never", Glibc: "2.36", Name: "AMD EPYC 7763"}
)

// The exported environment carries what the manifest's runtime candidate sets; libtorch's
// defaults (and a manifest from before runtimes were measured) write no file.
func TestRuntimeEnv(t *testing.T) {
	for _, rt := range []torchspeed.Runtime{{}, {Candidate: "default"}} {
		if b, note, _, err := RuntimeEnv(rt, "x.env", big, ""); b != nil || note != "" || err != nil {
			t.Errorf("%+v: %q %q %v", rt, b, note, err)
		}
	}
	b, note, _, err := RuntimeEnv(torchspeed.Runtime{Candidate: "thp+passive", Allocator: "default", HugePages: true, WaitPolicy: "PASSIVE", CPUCapability: "avx512"}, "m/torchspeed.env", big, "Zen 5")
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
	b, _, _, err = RuntimeEnv(torchspeed.Runtime{Candidate: "jemalloc-thp", Allocator: "jemalloc", HugePages: true}, "e", big, "Zen 5")
	if err != nil || !strings.Contains(string(b), "\nMALLOC_CONF=thp:always,metadata_thp:auto\n") || !strings.Contains(string(b), "# Allocator: jemalloc") || strings.Contains(string(b), "\nLD_PRELOAD=") {
		t.Errorf("jemalloc-thp: %v\n%s", err, b)
	}
	if _, _, _, err := RuntimeEnv(torchspeed.Runtime{Candidate: "x", CPUCapability: "avx9"}, "e", big, "Zen 5"); err == nil {
		t.Error("a bad capability in a manifest: no error")
	}
	// OpenBLAS's forced kernels come with the CPU they need.
	b, _, _, err = RuntimeEnv(torchspeed.Runtime{Candidate: "openblas-avx512", Allocator: "default", BLASCore: "SkylakeX"}, "e", big, "Zen 5")
	if err != nil || !strings.Contains(string(b), "\nOPENBLAS_CORETYPE=SkylakeX\n") || !strings.Contains(string(b), "AVX-512 F/BW/VL/DQ") {
		t.Errorf("openblas-avx512: %v\n%s", err, b)
	}
	if _, _, _, err := RuntimeEnv(torchspeed.Runtime{Candidate: "x", BLASCore: "Pentium9"}, "e", big, "Zen 5"); err == nil {
		t.Error("a bad OpenBLAS core in a manifest: no error")
	}
	// Exported on (or for) an AVX2 server: what would stop it on an illegal instruction, or
	// ask for huge pages it cannot give, is left out with a warning that names both CPUs.
	b, _, warnings, err := RuntimeEnv(torchspeed.Runtime{Candidate: "thp+avx512", Allocator: "default", HugePages: true, CPUCapability: "avx512", WaitPolicy: "PASSIVE"}, "e", zen3, "AMD EPYC 9B45")
	if err != nil || strings.Contains(string(b), "ATEN_CPU_CAPABILITY") || strings.Contains(string(b), "GLIBC_TUNABLES") || !strings.Contains(string(b), "\nOMP_WAIT_POLICY=PASSIVE\n") {
		t.Errorf("for Zen 3: %v\n%s", err, b)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "ATEN_CPU_CAPABILITY=avx512 left out (measured on AMD EPYC 9B45): this CPU (AMD EPYC 7763)") {
		t.Errorf("for Zen 3: warnings %q", warnings)
	}
}
