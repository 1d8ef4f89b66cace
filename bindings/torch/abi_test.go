package torch_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/bindings/torch/internal/kerneltest"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// within fails the test when f has not returned after d: a hang is a failure, not a stuck run.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v (deadlock)", what, d)
	}
}

// A failing forward describes its inputs while it holds their guards; a Close of one of them
// waiting for the write side used to block that description's second read lock, and the shared
// inference thread with it (issue 14: every model in the process hung).
func TestHostile01CloseInputDuringFailingForward(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	for i := 0; i < 50; i++ {
		within(t, 30*time.Second, "forward with a wrong-shape input while it is closed", func() {
			bad, err := torch.NewTensor(make([]float32, 3*5), []int64{3, 5})
			if err != nil {
				t.Error(err)
				return
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				outs, err := m.Forward(bad)
				if err == nil {
					torch.CloseOutputs(outs)
					t.Error("a [3 5] input ran on the digits model")
				}
			}()
			go func() {
				defer wg.Done()
				bad.Close()
			}()
			wg.Wait()
		})
	}
	// The shared thread still serves other calls.
	within(t, 30*time.Second, "forward after the races", func() {
		outs, err := m.Forward(tensorsOf(t, f.InputArrays(t))...)
		if err != nil {
			t.Error(err)
			return
		}
		torch.CloseOutputs(outs)
	})
}

// SetNumThreads while forwards run on the shared thread and on dedicated threads that start
// and close: no panic (SetWorkers once closed a channel under a running Forward), no hang.
func TestHostile04ThreadsUnderConcurrentUse(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	in := tensorsOf(t, f.InputArrays(t))
	defer torch.SetNumThreads(1)
	for i := 0; i < 50; i++ {
		within(t, 60*time.Second, "threads and forwards", func() {
			var wg sync.WaitGroup
			th := torch.NewThread()
			wg.Add(3)
			go func() {
				defer wg.Done()
				outs, err := m.Forward(in...)
				if err != nil {
					t.Error(err)
					return
				}
				torch.CloseOutputs(outs)
			}()
			go func() {
				defer wg.Done()
				err := th.Do(func() {
					outs, err := m.ForwardOnThisThread(in...)
					if err != nil {
						t.Error(err)
						return
					}
					torch.CloseOutputs(outs)
				})
				if err != nil && !errors.Is(err, torch.ErrThreadClosed) {
					t.Error(err)
				}
			}()
			go func() {
				defer wg.Done()
				if err := torch.SetNumThreads(1 + i%torch.AvailableCPUs()); err != nil {
					t.Error(err)
				}
				th.Close()
			}()
			wg.Wait()
			th.Close() // idempotent
			if err := th.Do(func() {}); !errors.Is(err, torch.ErrThreadClosed) {
				t.Errorf("Do after Close: %v", err)
			}
		})
	}
	// A thread started after SetNumThreads runs with that count.
	if err := torch.SetNumThreads(1); err != nil {
		t.Fatal(err)
	}
	th := torch.NewThread()
	defer th.Close()
	var n int
	if err := th.Do(func() { n = torch.NumThreadsOnThisThread() }); err != nil || n != 1 {
		t.Fatalf("new thread: %d threads, %v", n, err)
	}
}

// Thread counts outside 1..the CPUs available are refused with the value in the message; none
// is truncated to a C int (4294967297 once became 1).
func TestHostile03ThreadCountBounds(t *testing.T) {
	avail := torch.AvailableCPUs()
	if avail < 1 {
		t.Fatalf("AvailableCPUs = %d", avail)
	}
	defer torch.SetNumThreads(1)
	for _, n := range []int{0, -3, avail + 1, 2000, 4294967297, -4294967295} {
		for name, set := range map[string]func(int) error{
			"SetNumThreads": torch.SetNumThreads, "SetNumThreadsOnThisThread": torch.SetNumThreadsOnThisThread,
			"SetNumInteropThreads": torch.SetNumInteropThreads,
		} {
			err := set(n)
			if err == nil {
				t.Fatalf("%s(%d) accepted", name, n)
			}
			if !errors.Is(err, torch.InvalidArgument) {
				t.Errorf("%s(%d): %v, want an InvalidArgument error", name, n, err)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(n)) {
				t.Errorf("%s(%d): the error does not name the value: %v", name, n, err)
			}
		}
	}
	if err := torch.SetNumThreads(avail); err != nil {
		t.Fatalf("SetNumThreads(%d): %v", avail, err)
	}
	if got := torch.NumThreads(); got != avail {
		t.Fatalf("NumThreads = %d after SetNumThreads(%d)", got, avail)
	}
}

// Every public function and method given nil, closed or zero-value arguments returns an
// error (or a neutral value where it returns none); nothing panics.
func TestHostile04NoPanicOnBadArguments(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	closedM := loadFixture(t, f)
	closedM.Close()
	closedT, _ := torch.NewTensor([]float32{1}, []int64{1})
	closedT.Close()
	var nilM *torch.Module
	var zeroM torch.Module
	var nilT *torch.Tensor
	var zeroT torch.Tensor
	var nilTh *torch.Thread
	live := loadFixture(t, f)
	live0, _ := torch.NewTensor([]float32{1}, []int64{1})
	defer live0.Close()

	mods := map[string]*torch.Module{"nil": nilM, "zero": &zeroM, "closed": closedM}
	for name, m := range mods {
		t.Run("module "+name, func(t *testing.T) {
			errs := map[string]error{}
			_, errs["Forward"] = m.Forward()
			_, errs["ForwardOnThisThread"] = m.ForwardOnThisThread()
			_, errs["RunMethod"] = m.RunMethod("forward")
			_, errs["Clone"] = m.Clone()
			errs["Eval"] = m.Eval()
			_, errs["Freeze"] = m.Freeze("x")
			_, errs["FoldConvBN"] = m.FoldConvBN()
			_, errs["OptimizeForInference"] = m.OptimizeForInference()
			_, errs["ChannelsLast"] = m.ChannelsLast()
			_, errs["TimeForward"] = m.TimeForward(3)
			errs["Define"] = m.Define("def f(self) -> int:\n    return 1\n")
			errs["DefineOps"] = m.DefineOps("def f(self) -> int:\n    return 1\n")
			_, errs["Schema"] = m.Schema()
			_, errs["Graph"] = m.Graph()
			_, errs["NodeCounts"] = m.NodeCounts()
			_, errs["Submodules"] = m.Submodules()
			_, errs["ExtraFiles"] = m.ExtraFiles()
			errs["Save"] = m.Save(t.TempDir()+"/x.pt", nil)
			_, errs["QuantPrepare"] = m.QuantPrepare(torch.QuantConfig{})
			_, errs["QuantConvert"] = m.QuantConvert("")
			_, errs["QuantDynamic"] = m.QuantDynamic(torch.QuantConfig{}, "")
			_, errs["QuantLayers"] = m.QuantLayers()
			_, _, errs["OpFLOPs"] = m.OpFLOPs()
			_, _, errs["FuseConvAdd"] = m.FuseConvAdd()
			for fn, err := range errs {
				if err == nil {
					t.Errorf("%s on a %s module: no error", fn, name)
				} else if !errors.Is(err, torch.ErrClosed) && !errors.Is(err, torch.ErrNilHandle) {
					t.Errorf("%s on a %s module: %v, want ErrClosed or ErrNilHandle", fn, name, err)
				}
			}
			_ = m.Name()
			m.SetName("x")
			if m.NumInputs() > 0 && name != "closed" {
				t.Errorf("NumInputs of a %s module: %d", name, m.NumInputs())
			}
			if err := m.Close(); err != nil {
				t.Errorf("Close of a %s module: %v", name, err)
			}
		})
	}
	tensors := map[string]*torch.Tensor{"nil": nilT, "zero": &zeroT, "closed": closedT}
	for name, x := range tensors {
		t.Run("tensor "+name, func(t *testing.T) {
			if x.Shape() != nil || x.DType() != -1 || x.Numel() != 0 || x.String() != "closed" {
				t.Errorf("a %s tensor: shape %v dtype %d numel %d string %q", name, x.Shape(), x.DType(), x.Numel(), x.String())
			}
			errs := map[string]error{}
			_, errs["Data"] = torch.Data[float32](x)
			_, errs["DataAny"] = torch.DataAny(x)
			_, errs["Float32s"] = x.Float32s()
			_, errs["Float"] = x.Float()
			_, errs["ChannelsLast"] = x.ChannelsLast()
			_, errs["QParams"] = x.QParams()
			_, _, errs["QConv2dAdd"] = kerneltest.QConv2dAdd(x, x, kerneltest.QConvAddArgs{Weight: x, WeightScales: x}, kerneltest.Fast)
			_, _, errs["QConv2dAdd as residual"] = kerneltest.QConv2dAdd(live0, x, kerneltest.QConvAddArgs{Weight: live0, WeightScales: live0}, kerneltest.ATen)
			_, _, errs["QConv2dAdd nil weight"] = kerneltest.QConv2dAdd(live0, live0, kerneltest.QConvAddArgs{Weight: x, WeightScales: live0}, kerneltest.ATen)
			for fn, err := range errs {
				if err == nil {
					t.Errorf("%s on a %s tensor: no error", fn, name)
				}
			}
			// As an input: refused before libtorch sees it.
			if outs, err := live.Forward(x); err == nil {
				torch.CloseOutputs(outs)
				t.Errorf("forward with a %s tensor: no error", name)
			}
			if err := x.Close(); err != nil {
				t.Errorf("Close of a %s tensor: %v", name, err)
			}
		})
	}
	t.Run("functions", func(t *testing.T) {
		errs := map[string]error{}
		_, errs["Load empty path"] = torch.Load("")
		_, errs["LoadBytes nil"] = torch.LoadBytes(nil, "nil")
		_, errs["LoadWithEngine bad engine"] = torch.LoadWithEngine(f.ModelPath(), "nonsense")
		_, errs["NewTensor shape mismatch"] = torch.NewTensor([]float32{1, 2}, []int64{3})
		_, errs["NewTensor nil data with shape"] = torch.NewTensor([]float32(nil), []int64{2})
		_, errs["NewTensor negative shape"] = torch.NewTensor([]float32{}, []int64{-1})
		_, errs["NewTensor unsupported type"] = torch.NewTensorAny([]string{"a"}, []int64{1})
		_, errs["NewTensor nil"] = torch.NewTensorAny(nil, nil)
		errs["SetQEngine empty"] = torch.SetQEngine("")
		errs["Thread.Do nil thread"] = nilTh.Do(func() {})
		th := torch.NewThread()
		defer th.Close()
		errs["Thread.Do nil func"] = th.Do(nil)
		_, errs["NewObserver bad"] = torch.NewObserver(torch.ObserverConfig{Observer: "nonsense"}, false)
		for fn, err := range errs {
			if err == nil {
				t.Errorf("%s: no error", fn)
			}
		}
		torch.Do(nil)
		if err := nilTh.Close(); err != nil {
			t.Errorf("Close of a nil thread: %v", err)
		}
		torch.CloseOutputs([]torch.Output{{Name: "0"}})
	})
}

// Codes, not message text, say what kind of failure it was.
func TestErrorCodes(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	_, err := m.RunMethod("no_such_method")
	if !errors.Is(err, torch.NotFound) || errors.Is(err, torch.InvalidArgument) {
		t.Errorf("missing method: %v (code %v)", err, codeOf(err))
	}
	if err := torch.SetQEngine("nonsense"); !errors.Is(err, torch.NotFound) || !strings.Contains(err.Error(), "supported:") {
		t.Errorf("unknown engine: %v", err)
	}
	x, _ := torch.NewTensor(make([]float32, 15), []int64{3, 5})
	defer x.Close()
	if _, err := m.Forward(x); !errors.Is(err, torch.ModelError) {
		t.Errorf("wrong shape: %v (code %v)", err, codeOf(err))
	}
	if _, err := x.ChannelsLast(); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("channels-last of a 2-D tensor: %v (code %v)", err, codeOf(err))
	}
	if _, err := m.QuantPrepare(torch.QuantConfig{QConfig: torch.QConfig{Activation: torch.ObserverConfig{Observer: "nonsense"}}}); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("bad observer: %v (code %v)", err, codeOf(err))
	}
	if err := m.Define("def broken(self) -> int:\n    return undefined_name\n"); !errors.Is(err, torch.ModelError) {
		t.Errorf("bad TorchScript: %v (code %v)", err, codeOf(err))
	}
	good, _ := os.ReadFile(f.ModelPath())
	if _, err := torch.LoadBytes(good[:len(good)/2], "half"); !errors.Is(err, torch.Corrupt) {
		t.Errorf("truncated archive: %v (code %v)", err, codeOf(err))
	}
	if err := m.Save("/nonexistent-dir/x.pt", nil); err == nil || !strings.Contains(err.Error(), "nonexistent-dir") {
		t.Errorf("save into a missing folder: %v", err)
	}
}

func codeOf(err error) torch.Code {
	var te *torch.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// A file whose version record is newer than this libtorch reads says so, with both numbers,
// instead of "not a TorchScript module".
func TestHostile16NewerFileFormatVersion(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	maxv := torch.MaxFileFormatVersion()
	if maxv < 1 {
		t.Fatalf("MaxFileFormatVersion = %d", maxv)
	}
	p := fixtures.RewriteZip(t, f.ModelPath(), func(name string, data []byte) []byte {
		if strings.HasSuffix(name, "/version") {
			return []byte("99\n")
		}
		return data
	})
	_, err := torch.Load(p)
	want := "written by a newer PyTorch (file format version 99; this libtorch " + torch.Version() + " reads up to " + strconv.FormatInt(maxv, 10) + ")"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) || !errors.Is(err, torch.Unsupported) {
		t.Fatalf("error %v, want it to name the file and say %q", err, want)
	}
	// The same archive with its own version loads (the rewrite itself is not what failed).
	p = fixtures.RewriteZip(t, f.ModelPath(), func(_ string, data []byte) []byte { return data })
	m, err := torch.Load(p)
	if err != nil {
		t.Fatalf("rewritten archive: %v", err)
	}
	m.Close()
}

func TestClip(t *testing.T) {
	long := strings.Repeat("é", 500)
	c := torch.Clip(long)
	if len(c) > 260 || !strings.Contains(c, "more bytes") || !strings.HasPrefix(long, strings.Split(c, "...")[0]) {
		t.Fatalf("Clip: %d bytes: %q", len(c), c)
	}
	if torch.Clip("short") != "short" {
		t.Fatal("Clip changed a short string")
	}
}

// Typed tensors: NewTensor[T] and Data[T] round-trip every element type; a mismatched T is an
// error naming both types; a quantized tensor reads as its integer representation.
func TestTypedTensors(t *testing.T) {
	roundTrip(t, []float32{1.5, -2}, torch.Float32)
	roundTrip(t, []float64{1.5, -2}, torch.Float64)
	roundTrip(t, []int64{1 << 40, -2}, torch.Int64)
	roundTrip(t, []int32{7, -2}, torch.Int32)
	roundTrip(t, []int16{7, -2}, torch.Int16)
	roundTrip(t, []uint8{7, 255}, torch.Uint8)
	roundTrip(t, []int8{7, -128}, torch.Int8)
	roundTrip(t, []bool{true, false}, torch.Bool)

	x, err := torch.NewTensor([]float32{1, 2}, []int64{2})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if _, err := torch.Data[int64](x); !errors.Is(err, torch.InvalidArgument) || !strings.Contains(err.Error(), "float32 tensor read as int64") {
		t.Errorf("Data[int64] of a float32 tensor: %v", err)
	}
	// A shape whose element count overflows int64 is refused before any allocation.
	if _, err := torch.NewTensor([]float32{1}, []int64{1 << 62, 1 << 62}); !errors.Is(err, torch.InvalidArgument) {
		t.Errorf("overflowing shape: %v", err)
	}
}

func roundTrip[T torch.Element](t *testing.T, d []T, want torch.DType) {
	t.Helper()
	x, err := torch.NewTensor(d, []int64{int64(len(d))})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.DType() != want {
		t.Errorf("%T gave a %s tensor, want %s", d, x.DType(), want)
	}
	back, err := torch.Data[T](x)
	if err != nil {
		t.Fatal(err)
	}
	anyBack, err := torch.DataAny(x)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(back) != fmt.Sprint(d) || fmt.Sprint(anyBack) != fmt.Sprint(d) {
		t.Errorf("round trip %v -> %v, %v", d, back, anyBack)
	}
}

// The shim this test runs with is built from this tree: its API version is the bindings'.
func TestShimAPIVersionMatchesBindings(t *testing.T) {
	if got := torch.ShimAPIVersion(); got != torch.APIVersion {
		t.Errorf("libtorchspeed.so has API version %d, the bindings %d", got, torch.APIVersion)
	}
}

// exportedFunctions lists the ts_ functions a shared library exports (nm -D --defined-only).
func exportedFunctions(t *testing.T, lib string) map[string]bool {
	t.Helper()
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("%s: %v (the library is checked where it is built)", lib, err)
	}
	out, err := exec.Command("nm", "-D", "--defined-only", lib).Output()
	if err != nil {
		t.Skipf("nm -D %s: %v", lib, err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && strings.HasPrefix(f[2], "ts_") {
			names[f[2]] = true
		}
	}
	return names
}

// declaredFunctions lists the functions a C header declares with an export macro.
func declaredFunctions(t *testing.T, header, macro string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(macro+`\b[^;(]*?\b(ts_[a-z0-9_]+)\(`).FindAllStringSubmatch(string(src), -1) {
		names[m[1]] = true
	}
	if len(names) == 0 {
		t.Fatalf("%s declares no %s function", header, macro)
	}
	return names
}

// libtorchspeed.so exports exactly the functions torchspeed.h declares, so no test hook (they
// are in libtorchspeed_testing.so, which `make install` leaves out); that library exports only
// the ts_test_ functions of ts_testing.h.
func TestLibrariesExportTheirHeaders(t *testing.T) {
	for _, c := range []struct{ lib, header, macro string }{
		{"../../build/cmake/libtorchspeed.so", "../../csrc/abi/torchspeed.h", "TS_EXPORT"},
		{"../../build/cmake/libtorchspeed_testing.so", "../../csrc/testing/ts_testing.h", "TS_TESTING_EXPORT"},
	} {
		exported := exportedFunctions(t, c.lib)
		declared := declaredFunctions(t, c.header, c.macro)
		for name := range exported {
			if !declared[name] {
				t.Errorf("%s exports %s, which %s does not declare", c.lib, name, c.header)
			}
		}
		for name := range declared {
			if !exported[name] {
				t.Errorf("%s declares %s, which %s does not export", c.header, name, c.lib)
			}
		}
	}
	// The hooks the public library once had, whatever the header says.
	public := exportedFunctions(t, "../../build/cmake/libtorchspeed.so")
	for _, op := range []string{"quantize_per_tensor", "dequantize", "qadd", "linear", "linear_pack", "linear_packed", "conv2d", "qconv2d_add"} {
		for _, name := range []string{"ts_tensor_" + op, "ts_test_" + op} {
			if public[name] {
				t.Errorf("libtorchspeed.so exports the test hook %s", name)
			}
		}
	}
}
