package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// TestProbeAdviceRuns: every `torchspeed launch --FLAG VALUE` a probe finding advises is a
// flag launch --help shows, and launch --print-env with it exports what the advice says it
// does (it once named a hidden --latency-mode that set no wait policy at all).
func TestProbeAdviceRuns(t *testing.T) {
	bin := torchspeedBin(t)
	launch, _, err := newRootCmd().Find([]string{"launch"})
	if err != nil {
		t.Fatal(err)
	}
	advice := regexp.MustCompile(`torchspeed launch (--[a-z-]+)(?: ([a-z]+))?(?: \(it exports ([A-Z_]+=[A-Z0-9]+)\))?`)
	seen := 0
	for _, env := range [][]string{nil, {"OMP_WAIT_POLICY=ACTIVE"}} {
		p, err := cpu.Detect(cpu.Options{Root: filepath.Join("..", "..", "pkg", "cpu", "testdata", "vm-avx2"), Env: append([]string{"PATH=/bin"}, env...)})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p.Findings {
			for _, m := range advice.FindAllStringSubmatch(f.Fix, -1) {
				seen++
				flag := launch.Flags().Lookup(strings.TrimPrefix(m[1], "--"))
				if flag == nil || flag.Hidden {
					t.Errorf("finding %s advises %s, which launch --help does not show", f.Code, m[1])
					continue
				}
				args := []string{"launch", "--print-env", m[1]}
				if m[2] != "" {
					args = append(args, m[2])
				}
				out, errOut, code := runBin(t, bin, append(args, "--", "true")...)
				if code != 0 {
					t.Errorf("torchspeed %s: exit %d: %s", strings.Join(args, " "), code, errOut)
				}
				if m[3] != "" && !strings.Contains(out, "export "+m[3]+"\n") {
					t.Errorf("finding %s says torchspeed %s exports %s; it printed:\n%s", f.Code, strings.Join(args, " "), m[3], out)
				}
			}
		}
	}
	if seen == 0 {
		t.Error("no finding on a 4-CPU VM without OMP_WAIT_POLICY advised a launch flag")
	}
}
