package torch_test

import (
	"os"
	"strings"
	"testing"

	"github.com/klauspost/cpuid/v2"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// fastKernels says torchspeed's own FP32 kernels (fast_linear, fast_conv) run here, as
// csrc/kernels/fastq.h chooses them: AVX2 and FMA, not capped to scalar by TORCHSPEED_MAX_ISA. Without
// them the passes leave every graph as it was (TestFastPassesWithoutVectorKernels).
func fastKernels() bool {
	switch strings.ToLower(os.Getenv("TORCHSPEED_MAX_ISA")) {
	case "scalar", "default":
		return false
	}
	return cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3)
}

func skipWithoutFastKernels(t *testing.T) {
	t.Helper()
	if !fastKernels() {
		t.Skip("torchspeed's FP32 kernels need AVX2 and FMA (an older CPU, or TORCHSPEED_MAX_ISA=scalar): the passes change nothing here, as TestFastPassesWithoutVectorKernels checks")
	}
}

// On a CPU without AVX2 and FMA (or with the kernels capped to scalar) fast_linear and
// fast_conv swap nothing, and the models answer exactly as before.
func TestFastPassesWithoutVectorKernels(t *testing.T) {
	if fastKernels() {
		t.Skip("this CPU runs torchspeed's vector kernels: the scalar path runs under make check-isa (TORCHSPEED_MAX_ISA=scalar)")
	}
	man := fixtures.Load(t)
	for _, name := range []string{"digits", "transformer_traced"} {
		f := man.Get(t, name)
		m := loadFixture(t, f)
		in := tensorsOf(t, f.InputArrays(t))
		want, err := m.Forward(in...)
		if err != nil {
			t.Fatal(err)
		}
		for pass, run := range map[string]func() (*torch.Module, int, int, error){"fast_linear": m.FastLinear, "fast_conv": m.FastConv} {
			out, n, _, err := run()
			if err != nil {
				t.Fatalf("%s %s: %v", name, pass, err)
			}
			if n != 0 {
				t.Errorf("%s %s: %d layers swapped without vector kernels", name, pass, n)
			}
			got, err := out.Forward(in...)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if d, bound := sameKernelsDiff(t, got[i], want[i]); d > bound {
					t.Errorf("%s %s: output %s moved by %g", name, pass, got[i].Name, d)
				}
			}
			torch.CloseOutputs(got)
			out.Close()
		}
		torch.CloseOutputs(want)
	}
}
