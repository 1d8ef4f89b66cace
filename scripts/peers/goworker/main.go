// Command goworker is the Go-API contender of `make bench-peers`: a torchspeed artifact loaded
// with torchspeed.Load and called as a Go service calls it.
//
//	goworker -model ART.pt -input X.npy -threads N [-ref OUT.npy] [-mode predict|locked|cxx] [-stream]
//
// -stream: a stateful streaming model (Silero VAD): X.npy holds the ordered chunks, each call
// is Session.Predict on the next one (a Session on this goroutine's locked thread, as a Go
// service runs one audio stream) with the state carried, and the ready line gives the largest
// difference from OUT.npy over the whole stream (stream.go).
//
// Modes, to split the per-call cost from Go (the hop to the locked inference thread, the
// output wrapping) from the model's own time:
//
//	predict  Model.Predict from an ordinary goroutine: hops to the locked worker thread and
//	         wraps the outputs as Go tensors on every call (what a Go service does)
//	locked   ForwardOnThisThread in a loop already on the locked worker thread: no hop, still
//	         the outputs wrapped
//	cxx      Module.TimeForward: the C++ loop, no Go per call at all
//
// It speaks the protocol of `torchspeed bench --serve`: "ready {json}", then "run K" -> "ns"
// and K latencies in nanoseconds (after one untimed run), "quit" stops it.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

func main() {
	model := flag.String("model", "", "torchspeed artifact (or plain TorchScript file)")
	input := flag.String("input", "", "input tensor (npy)")
	threads := flag.Int("threads", 0, "intra-op threads (0: the artifact's)")
	ref := flag.String("ref", "", "FP32 reference output (npy) for the cosine in the ready line")
	mode := flag.String("mode", "predict", "predict, locked or cxx")
	warmup := flag.Int("warmup", 10, "untimed runs before ready")
	stream := flag.Bool("stream", false, "call Session.Predict on the chunks of -input in order, state carried (predict mode)")
	flag.Parse()
	run := run
	if *stream {
		run = runStreamFile
	}
	err := run(*model, *input, *threads, *ref, *mode, *warmup)
	if err != nil {
		fmt.Printf("error %s\n", strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(1)
	}
}

func runStreamFile(modelPath, inputPath string, threads int, refPath, mode string, warmup int) error {
	if modelPath == "" || inputPath == "" || mode != "predict" {
		return errors.New("goworker: -stream needs -model and -input, and -mode predict")
	}
	t0 := time.Now()
	m, err := torchspeed.Load(modelPath, torchspeed.LoadOptions{Threads: threads})
	if err != nil {
		return err
	}
	defer m.Close()
	if threads == 0 && m.Manifest != nil {
		threads = m.Manifest.Runtime.Threads
	}
	return runStream(m, inputPath, refPath, threads, warmup, t0)
}

func run(modelPath, inputPath string, threads int, refPath, mode string, warmup int) error {
	if modelPath == "" || inputPath == "" {
		return errors.New("goworker: -model and -input are required")
	}
	switch mode {
	case "predict", "locked", "cxx":
	default:
		return fmt.Errorf("goworker: -mode %q: want predict, locked or cxx", mode)
	}
	t0 := time.Now()
	m, err := torchspeed.Load(modelPath, torchspeed.LoadOptions{Threads: threads})
	if err != nil {
		return err
	}
	defer m.Close()
	x, err := readTensor(inputPath)
	if err != nil {
		return err
	}
	defer x.Close()
	// locked and cxx call the module directly, so they convert the input as Predict does.
	direct := []*torch.Tensor{x}
	if m.Manifest != nil && m.Manifest.ChannelsLast {
		conv, release, err := torchspeed.ChannelsLastInputs(direct)
		if err != nil {
			return err
		}
		defer release()
		direct = conv
	}
	var first []float32
	for i := 0; i < max(1, warmup); i++ {
		outs, err := m.Predict(x)
		if err != nil {
			return err
		}
		if i == 0 && len(outs) > 0 {
			if d, err := torch.Data[float32](outs[0].Tensor); err == nil {
				first = d
			}
		}
		torch.CloseOutputs(outs)
	}
	if threads == 0 && m.Manifest != nil {
		threads = m.Manifest.Runtime.Threads // the artifact's measured count, which Load applied
	}
	info := map[string]any{"mode": mode, "threads": threads, "precision": m.Manifest.Precision,
		"channels_last": m.Manifest.ChannelsLast, "setup_s": time.Since(t0).Seconds(), "warnings": m.Warnings}
	if refPath != "" && first != nil {
		a, err := npy.ReadFile(refPath)
		if err != nil {
			return err
		}
		want, err := a.Float32s()
		if err != nil {
			return err
		}
		info["cosine_vs_fp32"] = cosine(first, want)
	}
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "ready %s\n", raw)
	if err := w.Flush(); err != nil {
		return err
	}
	timeK := timer(m, x, direct, mode)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "quit" {
			return nil
		}
		k := 0
		if len(f) == 2 && f[0] == "run" {
			k, _ = strconv.Atoi(f[1])
		}
		if k < 1 {
			fmt.Fprintf(w, "error %q: want \"run K\" with K >= 1, or \"quit\"\n", sc.Text())
		} else {
			ns, err := timeK(k)
			if err != nil {
				return err
			}
			w.WriteString("ns")
			for _, d := range ns {
				w.WriteString(" " + strconv.FormatInt(d, 10))
			}
			w.WriteString("\n")
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// timer returns the timing loop of one mode; each call runs once untimed first.
func timer(m *torchspeed.Model, x *torch.Tensor, direct []*torch.Tensor, mode string) func(k int) ([]int64, error) {
	switch mode {
	case "cxx":
		return func(k int) ([]int64, error) {
			ns, err := m.Module().TimeForward(k+1, direct...)
			if err != nil {
				return nil, err
			}
			return ns[1:], nil
		}
	case "locked":
		return func(k int) (ns []int64, err error) {
			torch.Do(func() {
				ns = make([]int64, 0, k)
				for i := 0; i <= k; i++ {
					t := time.Now()
					outs, ferr := m.Module().ForwardOnThisThread(direct...)
					d := time.Since(t)
					if ferr != nil {
						err = ferr
						return
					}
					torch.CloseOutputs(outs)
					if i > 0 {
						ns = append(ns, d.Nanoseconds())
					}
				}
			})
			return ns, err
		}
	}
	return func(k int) ([]int64, error) {
		ns := make([]int64, 0, k)
		for i := 0; i <= k; i++ {
			t := time.Now()
			outs, err := m.Predict(x)
			d := time.Since(t)
			if err != nil {
				return nil, err
			}
			torch.CloseOutputs(outs)
			if i > 0 {
				ns = append(ns, d.Nanoseconds())
			}
		}
		return ns, nil
	}
}

func readTensor(path string) (*torch.Tensor, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch a.DType {
	case npy.Float32:
		d, err := a.Float32s()
		if err != nil {
			return nil, err
		}
		return torch.NewTensor(d, a.Shape)
	case npy.Int64:
		d, err := a.Int64s()
		if err != nil {
			return nil, err
		}
		return torch.NewTensor(d, a.Shape)
	}
	return nil, fmt.Errorf("input %q: dtype %s: want float32 or int64", path, a.DType)
}

func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.NaN()
	}
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / (math.Sqrt(aa)*math.Sqrt(bb) + 1e-30)
}
