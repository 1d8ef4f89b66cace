package main

import (
	"path/filepath"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// TestFastConvOnEmulatedAVX2: the digits CNN's FP32 artifact with fast_linear and fast_conv as
// load passes (the tiny-image convolution, conv + relu + max-pool + flatten fused) runs on an
// emulated Haswell through the AVX2 kernels, with no AVX-512 instruction, and answers as it
// does natively.
func TestFastConvOnEmulatedAVX2(t *testing.T) {
	e := newEmulated(t)
	f := fixtures.Load(t).Get(t, "digits")
	mod, err := torch.Load(f.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	frozen, err := mod.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	passes := []string{torchspeed.PassFreeze, torchspeed.PassFastLinear, torchspeed.PassFastConv}
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: version.Version, Libtorch: torch.Version(), SourceName: "digits.pt",
		Inputs:     []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}},
		LoadPasses: passes, Steps: passes, Precision: "fp32", CPU: torchspeed.CPUOf(p),
		Runtime: torchspeed.Runtime{Threads: 1, InteropThreads: 1},
	}
	if err := torchspeed.SaveArtifact(frozen, art, man); err != nil {
		t.Fatal(err)
	}
	input := "x=" + f.Path(f.Inputs[0].File)
	e.sameAsNative(t, art, input)
}
