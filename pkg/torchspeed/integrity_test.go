package torchspeed

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/version"
)

func goodManifest() *Manifest {
	return &Manifest{Format: version.ManifestFormat, Torchspeed: "test", Libtorch: torch.Version(), Precision: "fp32",
		Inputs: []InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}}}
}

// flip4 copies path and flips 4 bytes in the middle of its largest tensor record, as a bad disk
// or a bad copy would: the record's CRC no longer matches.
func flip4(t *testing.T, path string) string {
	t.Helper()
	_, off, size := fixtures.LargestRecord(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := off + int64(size/2)
	for i := int64(0); i < 4; i++ {
		b[at+i] ^= 0x5a
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// tamper rewrites the archive with 4 bytes of its largest tensor record changed and every CRC
// recomputed: only the digest can tell.
func tamper(t *testing.T, path string) string {
	t.Helper()
	target, _, _ := fixtures.LargestRecord(t, path)
	return fixtures.RewriteZip(t, path, func(name string, data []byte) []byte {
		if name == target {
			// A float32 constant times 500, as in issue 14.
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[:4]))
			binary.LittleEndian.PutUint32(data[:4], math.Float32bits(v*500+1))
		}
		return data
	})
}

func TestHostile15SaveArtifactRecordsDigest(t *testing.T) {
	man := goodManifest()
	p := saveWithManifest(t, man)
	d, err := ArchiveDigest(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(man.RecordsSHA256) != 64 || man.RecordsSHA256 != d {
		t.Fatalf("manifest digest %q, archive digest %q", man.RecordsSHA256, d)
	}
	m, err := Load(p, LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Manifest.RecordsSHA256 != d || len(m.Warnings) != 0 {
		t.Fatalf("loaded manifest digest %q, warnings %v", m.Manifest.RecordsSHA256, m.Warnings)
	}
}

// Issue 14: 4 bytes changed in a constant of an artifact loaded and answered 500x off; 23 of 80
// corrupted copies of a plain model loaded. Now each is refused, naming the file.
func TestHostile15LoadRefusesCorruptedArchives(t *testing.T) {
	art := saveWithManifest(t, goodManifest())
	plain := fixtures.Load(t).Get(t, "digits").ModelPath()
	cases := []struct {
		name, path, want string
	}{
		{"artifact, 4 bytes flipped", flip4(t, art), "is damaged (its checksum does not match)"},
		{"artifact, constant changed and CRCs fixed", tamper(t, art), "do not match the digests in its manifest: changed constants/"},
		{"plain model, 4 bytes flipped", flip4(t, plain), "is damaged (its checksum does not match)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Load(c.path, LoadOptions{KeepThreads: true})
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("error %q does not name the file and say %q", err, c.want)
			}
		})
	}
	// The untouched files still load.
	for _, p := range []string{art, plain} {
		m, err := Load(p, LoadOptions{KeepThreads: true})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		m.Close()
	}
}

// A manifest over the size bound is refused before it is parsed, and nothing long is echoed.
func TestHostile16LoadRefusesHugeManifest(t *testing.T) {
	man := goodManifest()
	man.Torchspeed = strings.Repeat("x", MaxManifestBytes+10)
	if err := SaveArtifact(loadFrozenDigits(t), filepath.Join(t.TempDir(), "x.pt"), man); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Fatalf("SaveArtifact with a huge manifest: %v", err)
	}
	raw, _ := man.Marshal()
	p := filepath.Join(t.TempDir(), "huge.torchspeed.pt")
	if err := loadFrozenDigits(t).Save(p, map[string][]byte{ManifestFile: raw}); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, LoadOptions{KeepThreads: true})
	if err == nil || !strings.Contains(err.Error(), "more than the") || len(err.Error()) > 1000 {
		t.Fatalf("error (%d bytes): %.300v", len(fmtErr(err)), err)
	}
	if _, err := ParseManifest([]byte(`{"format": 1, "threads": "` + strings.Repeat("y", 5000) + `"`)); err == nil || len(err.Error()) > 1000 {
		t.Fatalf("bad JSON error (%d bytes)", len(fmtErr(err)))
	}
}

func loadFrozenDigits(t *testing.T) *torch.Module {
	t.Helper()
	m, err := torch.Load(fixtures.Load(t).Get(t, "digits").ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Eval(); err != nil {
		t.Fatal(err)
	}
	fr, err := m.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fr.Close() })
	return fr
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A manifest asking for more threads than the process may use is clamped, with a warning.
func TestHostile03LoadClampsManifestThreads(t *testing.T) {
	defer torch.SetNumThreads(1)
	man := goodManifest()
	man.Runtime.Threads = 2000
	m, err := Load(saveWithManifest(t, man))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	avail := torch.AvailableCPUs()
	if got := torch.NumThreads(); got != avail {
		t.Errorf("threads after loading a 2000-thread manifest: %d, want %d", got, avail)
	}
	if len(m.Warnings) == 0 || !strings.Contains(strings.Join(m.Warnings, "\n"), "asks for 2000 threads") {
		t.Errorf("warnings: %v", m.Warnings)
	}
	// An explicit option outside the range is an error naming the value, not a clamp.
	if _, err := Load(saveWithManifest(t, goodManifest()), LoadOptions{Threads: -3}); err == nil || !strings.Contains(err.Error(), "-3") {
		t.Errorf("threads -3: %v", err)
	}
}

// Issue 14: an INT8 artifact's answers depended on the engine set before Load, because weights
// are packed while loading. Load sets the manifest's engine first.
func TestHostile14LoadSetsEngineBeforeLoading(t *testing.T) {
	for _, name := range []string{"digits", "resnet18", "lstm"} {
		t.Run(name, func(t *testing.T) { checkEngineBeforeLoad(t, name) })
	}
}

func checkEngineBeforeLoad(t *testing.T, name string) {
	f := fixtures.Load(t).Get(t, name)
	ref := f.QuantRef
	if ref == nil {
		t.Skipf("%s has no INT8 reference", name)
	}
	engines, err := supportedEngines()
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, e := range engines {
		if e != ref.Engine {
			other = e
		}
	}
	if other == "" {
		t.Skipf("only engine %s: nothing to switch from", ref.Engine)
	}
	if err := torch.SetQEngine(ref.Engine); err != nil {
		t.Fatal(err)
	}
	q, err := torch.Load(f.Path(ref.File))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	man := goodManifest()
	man.Inputs = nil
	man.Precision, man.QEngine = "int8-static", ref.Engine
	p := filepath.Join(t.TempDir(), "int8.torchspeed.pt")
	if err := SaveArtifact(q, p, man); err != nil {
		t.Fatal(err)
	}
	var inputs []*torch.Tensor
	for _, in := range f.InputArrays(t) {
		x, err := torch.NewTensorAny(in.Data, in.Shape)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		inputs = append(inputs, x)
	}
	outputs := func(before string) []float32 {
		if err := torch.SetQEngine(before); err != nil {
			t.Fatal(err)
		}
		m, err := Load(p, LoadOptions{KeepThreads: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		outs, err := m.Predict(inputs...)
		if err != nil {
			t.Fatal(err)
		}
		defer torch.CloseOutputs(outs)
		v, err := outs[0].Tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := outputs(ref.Engine)
	got := outputs(other)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("output %d: %v after loading with %s set before, %v with %s", i, got[i], other, want[i], ref.Engine)
		}
	}
	if name == "digits" {
		loadsDuringEngineSwitches(t, p, inputs, want, engines)
	}
}

// loadsDuringEngineSwitches loads and runs the artifact at p from 4 goroutines while another
// switches the process's engine in a loop: every load still packs its weights with the
// manifest's engine (engine switches are serialized with loads) and answers want.
func loadsDuringEngineSwitches(t *testing.T, p string, inputs []*torch.Tensor, want []float32, engines []string) {
	if before, err := torch.QEngine(); err == nil {
		defer torch.SetQEngine(before)
	}
	stop := make(chan struct{})
	var flips, loads sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				torch.SetQEngine(engines[i%len(engines)])
			}
		}
	}()
	for g := 0; g < 4; g++ {
		loads.Add(1)
		go func() {
			defer loads.Done()
			for k := 0; k < 5; k++ {
				m, err := Load(p, LoadOptions{KeepThreads: true})
				if err != nil {
					t.Error(err)
					return
				}
				outs, err := m.Predict(inputs...)
				var v []float32
				if err == nil {
					v, err = outs[0].Tensor.Float32s()
					torch.CloseOutputs(outs)
				}
				m.Close()
				if err != nil || !slices.Equal(v, want) {
					t.Errorf("a load racing engine switches: %v, outputs %v, want %v", err, v, want)
					return
				}
			}
		}()
	}
	loads.Wait()
	close(stop)
	flips.Wait()
}

func supportedEngines() ([]string, error) { return torch.SupportedQEngines() }

// Nil inputs are an error everywhere, channels-last artifacts included (it used to panic).
func TestHostile04PredictNilInputs(t *testing.T) {
	man := goodManifest()
	man.ChannelsLast = true
	m, err := Load(saveWithManifest(t, man), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Predict(nil); err == nil || !strings.Contains(err.Error(), "input 0 is nil") {
		t.Errorf("Predict(nil): %v", err)
	}
	if _, _, err := ChannelsLastInputs([]*torch.Tensor{nil}); err == nil {
		t.Error("ChannelsLastInputs(nil): no error")
	}
	var none *Model
	if _, err := none.Predict(); err == nil {
		t.Error("Predict on a nil model: no error")
	}
	if none.Close() != nil || none.Module() != nil {
		t.Error("nil model Close/Module")
	}
	m.Close()
	x, _ := torch.NewTensor(make([]float32, 64), []int64{1, 1, 8, 8})
	defer x.Close()
	if _, err := m.Predict(x); !errors.Is(err, torch.ErrClosed) {
		t.Errorf("Predict after Close: %v", err)
	}
	if _, err := Load(""); err == nil {
		t.Error("Load(\"\"): no error")
	}
}
