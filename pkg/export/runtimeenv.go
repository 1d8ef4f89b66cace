package export

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// RuntimeEnvFile holds the environment the artifact was measured fastest with, for the server
// process: `docker run --env-file`, systemd's EnvironmentFile=, or the shell that starts
// tritonserver or torchserve.
const RuntimeEnvFile = "torchspeed.env"

// RuntimeEnv returns RuntimeEnvFile's text for the runtime optimize kept (the manifest's
// runtime.candidate: wait policy, huge pages, ATen's ISA), and a note saying where to give it;
// nil when libtorch's defaults were kept or nothing was measured. The allocator is a library to
// preload, whose path depends on the server's image: the file names it in a comment. Settings
// that need instructions or kernel features machine here lacks (runenv.Candidate.Fit; from names
// the CPU the artifact was measured on) are left out, each with a warning: exported from an
// AVX-512 machine for AVX2 servers, ATEN_CPU_CAPABILITY=avx512 would stop them on an illegal
// instruction.
func RuntimeEnv(rt torchspeed.Runtime, file string, here runenv.Machine, from string) (env []byte, note string, warnings []string, err error) {
	if rt.Candidate == "" || rt.Candidate == runenv.DefaultCandidate {
		return nil, "", nil, nil
	}
	c := runenv.Candidate{Name: rt.Candidate, WaitPolicy: rt.WaitPolicy, SpinCount: rt.SpinCount, HugePages: rt.HugePages,
		CPUCapability: rt.CPUCapability, BLASCore: rt.BLASCore, Allocator: "default"}
	c, warnings = c.Fit(here, from)
	alloc := rt.Allocator
	if alloc == "jemalloc" || alloc == "tcmalloc" {
		// Apply needs the library's path for a preloaded allocator; the variables do not.
		c.Allocator, c.AllocatorPath = alloc, "/"+alloc
	}
	openmp := rt.OpenMP
	if openmp == "" {
		openmp = "gnu"
	}
	s, err := c.Apply(runenv.Settings{OpenMP: openmp})
	if err != nil {
		return nil, "", warnings, fmt.Errorf("manifest runtime: %w", err)
	}
	if len(s.Vars) == 0 && c.AllocatorPath == "" {
		return nil, "", warnings, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by torchspeed export: the runtime environment optimize measured fastest for this\n")
	fmt.Fprintf(&b, "# artifact (candidate %s) against libtorch's defaults. Give it to the server process:\n", rt.Candidate)
	fmt.Fprintf(&b, "# docker run --env-file %s, systemd EnvironmentFile=, or `set -a; . %s; set +a` before starting it.\n", file, file)
	for _, v := range s.Vars {
		if _, ok := map[string]bool{"GLIBC_TUNABLES": true, "MALLOC_CONF": true}[v.Name]; ok {
			fmt.Fprintf(&b, "# %s replaces the server's own: add its other entries here if it sets any.\n", v.Name)
		}
		if v.Name == "ATEN_CPU_CAPABILITY" {
			fmt.Fprintf(&b, "# ATEN_CPU_CAPABILITY=%s runs ATen's %s kernels: only for servers whose CPU has them (others stop on an illegal instruction).\n", v.Value, strings.ToUpper(v.Value))
		}
		if v.Name == "OPENBLAS_CORETYPE" {
			fmt.Fprintf(&b, "# OPENBLAS_CORETYPE forces OpenBLAS's %s kernels: only for servers whose CPU has AVX-512 F/BW/VL/DQ (others stop on an illegal instruction).\n", v.Value)
		}
		fmt.Fprintf(&b, "%s=%s\n", v.Name, v.Value)
	}
	if c.AllocatorPath != "" {
		fmt.Fprintf(&b, "# Allocator: %s, preloaded (LD_PRELOAD=<path of lib%s.so.2 or .so.4 in the server's image>).\n", alloc, alloc)
	}
	return []byte(b.String()), fmt.Sprintf("runtime environment (candidate %s) in %s: give it to the server process (docker run --env-file, systemd EnvironmentFile=)", rt.Candidate, file), warnings, nil
}

// machineOr is m, or this machine's facts (runenv.MachineOf) when m is nil; a machine that
// cannot be read counts as one with none of the instruction sets a setting may need, so the
// environment written leaves them out rather than risk an illegal instruction.
func machineOr(m *runenv.Machine) runenv.Machine {
	if m != nil {
		return *m
	}
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return runenv.Machine{}
	}
	return runenv.MachineOf(p)
}

// warningNotes are warnings in the form export's notes take.
func warningNotes(w []string) []string {
	out := make([]string, len(w))
	for i, s := range w {
		out[i] = "warning: " + s
	}
	return out
}

// withOpsPreload adds to env (RuntimeEnvFile's text, nil for none) the LD_PRELOAD of
// torchspeed's op library at lib: Triton's PyTorch backend loads custom operators only from
// libraries preloaded into tritonserver. The path is where the export put the library; a
// server that mounts the repository elsewhere (a container) gives the path it sees there.
func withOpsPreload(env []byte, lib string) []byte {
	var b strings.Builder
	if env == nil {
		b.WriteString("# Written by torchspeed export: give it to the server process (docker run --env-file,\n")
		b.WriteString("# systemd EnvironmentFile=, or `set -a; . torchspeed.env; set +a` before starting it).\n")
	} else {
		b.Write(env)
	}
	fmt.Fprintf(&b, "# The model calls torchspeed's operators: %s registers them and must be loaded before the\n", filepath.Base(lib))
	b.WriteString("# model (LD_PRELOAD, as Triton documents for TorchScript custom operations). Give the path the\n")
	b.WriteString("# server sees; the library must be built against the server's libtorch (LIBTORCH_HOME=... make shim),\n")
	b.WriteString("# whose folder must be on the library path (Triton: LD_LIBRARY_PATH=/opt/tritonserver/backends/pytorch).\n")
	b.WriteString("# With a preloaded allocator, list both, separated by ':'.\n")
	fmt.Fprintf(&b, "LD_PRELOAD=%s\n", lib)
	return []byte(b.String())
}
