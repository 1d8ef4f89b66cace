package runenv

import (
	"strings"
	"testing"
)

// Machines of a mixed fleet: what each can run decides what Fit keeps and CheckISAEnv allows.
var (
	fleetHaswell = Machine{AVX2: true, THP: "madvise", Glibc: "2.36", Name: "Intel Xeon E5-2680 v3"}
	fleetZen3    = Machine{AVX2: true, THP: "never", Glibc: "2.36", Name: "AMD EPYC 7763"}
	fleetSkylake = Machine{AVX2: true, AVX512: true, THP: "always", Glibc: "2.35", Name: "Intel Xeon Gold 6148"}
	fleetSPR     = Machine{AVX2: true, AVX512: true, BF16: true, THP: "always", Glibc: "2.36", Name: "Intel Xeon Platinum 8480+"}
	fleetOld     = Machine{THP: "always", Glibc: "2.31", Name: "Intel Xeon X5670"}
)

func TestFitAcrossAFleet(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Candidate
		m    Machine
		// want: what stays; notes: substrings of the notes, one per setting left out.
		want  Candidate
		notes []string
	}{
		{"avx512 on Zen 3", Candidate{Name: "avx512", CPUCapability: "avx512"}, fleetZen3,
			Candidate{Name: "avx512"}, []string{"ATEN_CPU_CAPABILITY=avx512 left out (measured on Zen 5): this CPU (AMD EPYC 7763) lacks AVX-512"}},
		{"avx512 on Skylake-SP", Candidate{Name: "avx512", CPUCapability: "avx512"}, fleetSkylake,
			Candidate{Name: "avx512", CPUCapability: "avx512"}, nil},
		{"avx2 on a pre-AVX2 Xeon", Candidate{Name: "x", CPUCapability: "avx2"}, fleetOld,
			Candidate{Name: "x"}, []string{"ATEN_CPU_CAPABILITY=avx2 left out", "lacks AVX2 and FMA"}},
		{"SkylakeX BLAS on Haswell", Candidate{Name: "openblas-avx512", BLASCore: "SkylakeX"}, fleetHaswell,
			Candidate{Name: "openblas-avx512"}, []string{"OPENBLAS_CORETYPE=SkylakeX left out"}},
		{"Haswell BLAS on a pre-AVX2 Xeon", Candidate{Name: "b", BLASCore: "Haswell"}, fleetOld,
			Candidate{Name: "b"}, []string{"OPENBLAS_CORETYPE=Haswell left out"}},
		{"glibc huge pages where THP is off", Candidate{Name: "thp", Allocator: "default", HugePages: true}, fleetZen3,
			Candidate{Name: "thp", Allocator: "default"}, []string{"huge pages left out", "transparent huge pages never"}},
		{"glibc huge pages with glibc 2.31", Candidate{Name: "thp", Allocator: "default", HugePages: true}, fleetOld,
			Candidate{Name: "thp", Allocator: "default"}, []string{"glibc 2.31"}},
		{"jemalloc huge pages where THP is off", Candidate{Name: "jemalloc-thp", Allocator: "jemalloc", AllocatorPath: "/x.so", HugePages: true}, fleetZen3,
			Candidate{Name: "jemalloc-thp", Allocator: "jemalloc", AllocatorPath: "/x.so"}, []string{"jemalloc cannot get them"}},
		{"everything on Sapphire Rapids", Candidate{Name: "all", CPUCapability: "avx512", BLASCore: "SkylakeX", Allocator: "default", HugePages: true}, fleetSPR,
			Candidate{Name: "all", CPUCapability: "avx512", BLASCore: "SkylakeX", Allocator: "default", HugePages: true}, nil},
		{"wait policy anywhere", Candidate{Name: "passive", WaitPolicy: "PASSIVE"}, fleetOld, Candidate{Name: "passive", WaitPolicy: "PASSIVE"}, nil},
	} {
		got, notes := tc.c.Fit(tc.m, "Zen 5")
		if got != tc.want {
			t.Errorf("%s: kept %+v, want %+v", tc.name, got, tc.want)
		}
		if len(tc.notes) == 0 && len(notes) != 0 || len(tc.notes) > 0 && len(notes) != 1 {
			t.Errorf("%s: notes %q, want one with %q", tc.name, notes, tc.notes)
			continue
		}
		for _, s := range tc.notes {
			if !strings.Contains(notes[0], s) {
				t.Errorf("%s: note %q lacks %q", tc.name, notes[0], s)
			}
		}
	}
}

func TestCheckISAEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		m    Machine
		want string // "" for no error, else a substring of it
	}{
		{map[string]string{"ATEN_CPU_CAPABILITY": "avx512"}, fleetZen3, "ATEN_CPU_CAPABILITY=avx512 is set, but this CPU (AMD EPYC 7763) lacks AVX-512"},
		{map[string]string{"ATEN_CPU_CAPABILITY": "AVX512"}, fleetHaswell, "lacks AVX-512"},
		{map[string]string{"ATEN_CPU_CAPABILITY": "avx512"}, fleetSkylake, ""},
		{map[string]string{"ATEN_CPU_CAPABILITY": "avx2"}, fleetZen3, ""},
		{map[string]string{"ATEN_CPU_CAPABILITY": "avx2"}, fleetOld, "lacks AVX2 and FMA"},
		{map[string]string{"ATEN_CPU_CAPABILITY": "default"}, fleetOld, ""},
		{map[string]string{"OPENBLAS_CORETYPE": "SkylakeX"}, fleetZen3, "OPENBLAS_CORETYPE=SkylakeX is set"},
		{map[string]string{"OPENBLAS_CORETYPE": "Cooperlake"}, fleetSkylake, "lacks AVX512_BF16"},
		{map[string]string{"OPENBLAS_CORETYPE": "Cooperlake"}, fleetSPR, ""},
		{map[string]string{"OPENBLAS_CORETYPE": "Haswell"}, fleetOld, "lacks AVX2"},
		{map[string]string{"OPENBLAS_CORETYPE": "Haswell"}, fleetZen3, ""},
		// A ceiling oneDNN lowers to the CPU's own: never refused.
		{map[string]string{"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, fleetOld, ""},
	} {
		err := CheckISAEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, tc.m)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v on %s: %v", tc.env, tc.m.Name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v on %s: %v, want an error with %q", tc.env, tc.m.Name, err, tc.want)
		}
	}
}
