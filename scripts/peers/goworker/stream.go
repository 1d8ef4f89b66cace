package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/npy"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// chunkStream is a stateful model's stream, as a Go service streams audio through Silero VAD:
// a Session (its own copy of the state) on the calling goroutine's locked OS thread, called
// with Predict on the ordered chunks of one tensor (call i takes slice i along the first axis).
// The artifact's manifest supplies the constant arguments (sr). At the stream's end the
// session is reset, untimed.
type chunkStream struct {
	m      *torchspeed.Session
	chunks []*torch.Tensor
	next   int
}

func newChunkStream(m *torchspeed.Session, path string) (*chunkStream, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d, err := a.Float32s()
	if err != nil {
		return nil, fmt.Errorf("stream input %q: %w (want float32 chunks)", path, err)
	}
	if len(a.Shape) < 2 || a.Shape[0] < 1 {
		return nil, fmt.Errorf("stream input %q: shape %v: want [calls, chunk...]", path, a.Shape)
	}
	n := len(d) / int(a.Shape[0])
	s := &chunkStream{m: m}
	for i := 0; i < int(a.Shape[0]); i++ {
		t, err := torch.NewTensor(d[i*n:(i+1)*n], a.Shape[1:])
		if err != nil {
			s.close()
			return nil, err
		}
		s.chunks = append(s.chunks, t)
	}
	return s, s.reset()
}

func (s *chunkStream) close() {
	for _, t := range s.chunks {
		t.Close()
	}
}

func (s *chunkStream) reset() error {
	s.next = 0
	return s.m.Reset()
}

// wrap resets the model when the stream is at its end, so the next call starts it over.
func (s *chunkStream) wrap() error {
	if s.next == len(s.chunks) {
		return s.reset()
	}
	return nil
}

// call makes the next call and returns its first output as float32s.
func (s *chunkStream) call(keep bool) ([]float32, error) {
	if err := s.wrap(); err != nil {
		return nil, err
	}
	outs, err := s.m.Predict(s.chunks[s.next])
	s.next++
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	if !keep || len(outs) == 0 {
		return nil, nil
	}
	return torch.Data[float32](outs[0].Tensor)
}

// maxAbsVs runs the whole stream from a reset state and returns the largest difference of the
// first output from ref's values, one per call.
func (s *chunkStream) maxAbsVs(refPath string) (float64, error) {
	a, err := npy.ReadFile(refPath)
	if err != nil {
		return 0, err
	}
	want, err := a.Float32s()
	if err != nil {
		return 0, err
	}
	if len(want) != len(s.chunks) {
		return 0, fmt.Errorf("reference %q: %d values for %d calls", refPath, len(want), len(s.chunks))
	}
	if err := s.reset(); err != nil {
		return 0, err
	}
	worst := 0.0
	for i := range s.chunks {
		got, err := s.call(true)
		if err != nil {
			return 0, err
		}
		if len(got) != 1 {
			return 0, fmt.Errorf("call %d: %d output values, want 1", i, len(got))
		}
		worst = math.Max(worst, math.Abs(float64(got[0])-float64(want[i])))
	}
	return worst, s.reset()
}

// runStream is run for -stream: ready with max_abs_vs_ref, then "run K" answered with K
// per-call latencies of Predict on the next chunks.
func runStream(m *torchspeed.Model, inputPath, refPath string, threads, warmup int, t0 time.Time) error {
	// Every call runs on this goroutine's thread (Session CallerThread), with its OpenMP pool
	// sized here, as bench's streams run: no hand-off to the shared inference workers.
	runtime.LockOSThread()
	if err := torch.SetNumThreads(max(1, threads)); err != nil {
		return err
	}
	sess, err := m.NewSession(torchspeed.SessionOptions{CallerThread: true})
	if err != nil {
		return err
	}
	defer sess.Close()
	s, err := newChunkStream(sess, inputPath)
	if err != nil {
		return err
	}
	defer s.close()
	info := map[string]any{"mode": "session-stream", "threads": threads, "precision": m.Manifest.Precision,
		"stream_calls": len(s.chunks), "warnings": m.Warnings}
	if refPath != "" {
		if info["max_abs_vs_ref"], err = s.maxAbsVs(refPath); err != nil {
			return err
		}
	}
	for i := 0; i < max(1, warmup); i++ {
		if _, err := s.call(false); err != nil {
			return err
		}
	}
	info["setup_s"] = time.Since(t0).Seconds()
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "ready %s\n", raw)
	if err := w.Flush(); err != nil {
		return err
	}
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
		} else if err := timeStream(w, s, k); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// timeStream writes "ns" and the latencies of k calls after one untimed call; the reset at the
// stream's end is not timed.
func timeStream(w *bufio.Writer, s *chunkStream, k int) error {
	if _, err := s.call(false); err != nil {
		return err
	}
	w.WriteString("ns")
	for i := 0; i < k; i++ {
		if err := s.wrap(); err != nil {
			return err
		}
		t := time.Now()
		_, err := s.call(false)
		d := time.Since(t)
		if err != nil {
			return err
		}
		w.WriteString(" " + strconv.FormatInt(d.Nanoseconds(), 10))
	}
	w.WriteString("\n")
	return nil
}
