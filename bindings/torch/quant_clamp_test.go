package torch_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/quant"
)

// TestQuantFoldsReLU6 checks that static INT8 folds MobileNet's ReLU6 (aten::hardtanh_(x, 0, 6)
// after each quantized conv, which quantize_jit leaves as a separate pass over a quantized
// tensor) into the conv's output quantization: no clamp is left, every conv stays quantized,
// and the outputs stay as close to FP32 as quantize_jit's unfolded graph (cosine 0.9726 on
// this input) or closer. A fold with a wrong scale or zero point clips or shifts every ReLU6
// output and fails the cosine.
func TestQuantFoldsReLU6(t *testing.T) {
	man := fixtures.Load(t)
	f := man.Get(t, "mobilenet_v2")
	m := loadFixture(t, f)
	before, err := m.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if before["aten::hardtanh_"]+before["aten::hardtanh"] == 0 {
		t.Fatalf("the mobilenet_v2 fixture has no hardtanh (ReLU6) to fold: %v", before)
	}
	engines, err := torch.SupportedQEngines()
	if err != nil {
		t.Fatal(err)
	}
	engine, err := quant.ResolveEngine("auto", engines, runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	cfg := torch.QuantConfig{QConfig: torch.QConfig{Activation: torch.ObserverConfig{
		Observer: torch.ObserverMinMax, ReduceRange: quant.ResolveReduceRange("auto", engine, quant.ExactU8S8())}}}
	observed, err := m.QuantPrepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer observed.Close()
	// Calibration: 8 standard-normal images (what the fixture's input and BatchNorm statistics
	// come from), seeded.
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]float32, 8*3*224*224)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	cx, err := torch.NewTensor(data, []int64{8, 3, 224, 224})
	if err != nil {
		t.Fatal(err)
	}
	defer cx.Close()
	outs, err := observed.Forward(cx)
	if err != nil {
		t.Fatal(err)
	}
	torch.CloseOutputs(outs)
	q, err := observed.QuantConvert(engine)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	after, err := q.NodeCounts()
	if err != nil {
		t.Fatal(err)
	}
	if n := after["aten::hardtanh_"] + after["aten::hardtanh"]; n != 0 {
		t.Errorf("%d hardtanh left after quantization, want 0 (all follow a quantized conv): %v", n, after)
	}
	convs := before["aten::_convolution"] + before["aten::conv2d"]
	if got := after["quantized::conv2d"] + after["quantized::conv2d_relu"]; got != convs {
		t.Errorf("%d quantized convolutions, want %d (every conv of the FP32 graph): %v", got, convs, after)
	}
	res, err := q.Forward(tensorsOf(t, f.InputArrays(t))...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(res)
	got, err := res[0].Tensor.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want, err := f.Array(t, f.Outputs[0]).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	// At 8-bit activations quantize_jit's unfolded graph gives cosine 0.9726 on this input: 0.97
	// leaves it room. Quantization noise of a k-bit grid has power proportional to 4^-k, and 1 -
	// cosine is about half the noise-to-signal power, so 7-bit activations (reduce_range, where
	// oneDNN's INT8 kernels saturate 8-bit ones) allow 4x the deficit, and the error 2x. A fold
	// with a wrong scale or zero point clips or shifts every ReLU6 output: far beyond either.
	minCos, maxErr := 0.97, 0.2
	if cfg.Activation.ReduceRange {
		minCos, maxErr = 1-4*(1-minCos), 2*maxErr
	}
	if c, d := cosine(got, want), maxAbs(got, want); c < minCos || d > maxErr {
		t.Errorf("INT8 (engine %s, reduce_range %v) vs FP32: cosine %.5f (want >= %.2f), max abs error %.3g (want <= %.2g)", engine, cfg.Activation.ReduceRange, c, minCos, d, maxErr)
	} else {
		t.Logf("INT8 (engine %s) vs FP32: cosine %.5f, max abs error %.3g; %d clamps folded", engine, c, d,
			before["aten::hardtanh_"]+before["aten::hardtanh"])
	}
}
