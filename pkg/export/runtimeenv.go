package export

import (
	"fmt"
	"strings"

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
// preload, whose path depends on the server's image: the file names it in a comment.
func RuntimeEnv(rt torchspeed.Runtime, file string) ([]byte, string, error) {
	if rt.Candidate == "" || rt.Candidate == runenv.DefaultCandidate {
		return nil, "", nil
	}
	c := runenv.Candidate{Name: rt.Candidate, WaitPolicy: rt.WaitPolicy, SpinCount: rt.SpinCount, HugePages: rt.HugePages,
		CPUCapability: rt.CPUCapability, BLASCore: rt.BLASCore, Allocator: "default"}
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
		return nil, "", fmt.Errorf("manifest runtime: %w", err)
	}
	if len(s.Vars) == 0 && c.AllocatorPath == "" {
		return nil, "", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by torchspeed export: the runtime environment optimize measured fastest for this\n")
	fmt.Fprintf(&b, "# artifact (candidate %s) against libtorch's defaults. Give it to the server process:\n", rt.Candidate)
	fmt.Fprintf(&b, "# docker run --env-file %s, systemd EnvironmentFile=, or `set -a; . %s; set +a` before starting it.\n", file, file)
	for _, v := range s.Vars {
		if _, ok := map[string]bool{"GLIBC_TUNABLES": true, "MALLOC_CONF": true}[v.Name]; ok {
			fmt.Fprintf(&b, "# %s replaces the server's own: add its other entries here if it sets any.\n", v.Name)
		}
		if v.Name == "OPENBLAS_CORETYPE" {
			fmt.Fprintf(&b, "# OPENBLAS_CORETYPE forces OpenBLAS's %s kernels: only for servers whose CPU has AVX-512 F/BW/VL/DQ (others stop on an illegal instruction).\n", v.Value)
		}
		fmt.Fprintf(&b, "%s=%s\n", v.Name, v.Value)
	}
	if c.AllocatorPath != "" {
		fmt.Fprintf(&b, "# Allocator: %s, preloaded (LD_PRELOAD=<path of lib%s.so.2 or .so.4 in the server's image>).\n", alloc, alloc)
	}
	return []byte(b.String()), fmt.Sprintf("runtime environment (candidate %s) in %s: give it to the server process (docker run --env-file, systemd EnvironmentFile=)", rt.Candidate, file), nil
}
