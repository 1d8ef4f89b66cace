package torchspeed

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// Predicts from many goroutines at once, on the shared inference thread and on sessions' own
// threads, while the model and the sessions close under them, under each hand-off spin setting:
// every Predict returns the fixture's output or a closed error, none hangs (run under -race).
func TestConcurrentPredictsWithCloseUnderHandoffSpins(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	arrays := f.InputArrays(t)
	want, err := f.OutputArrays(t)["0"].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	serve, wait := torch.HandoffSpin()
	defer func() {
		if err := torch.SetHandoffSpin(serve, wait); err != nil {
			t.Error(err)
		}
	}()
	for _, spin := range [][2]time.Duration{{0, 0}, {time.Microsecond, time.Microsecond}, {serve, wait}, {20 * time.Millisecond, 20 * time.Millisecond}} {
		if err := torch.SetHandoffSpin(spin[0], spin[1]); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("spins %v/%v", spin[0], spin[1])
		m, err := Load(f.ModelPath(), LoadOptions{KeepThreads: true})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			predictsWhileClosing(t, m, arrays[0].Data, arrays[0].Shape, want, what)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: concurrent Predicts with Close: still running after 2 minutes (deadlock)", what)
		}
	}
}

func predictsWhileClosing(t *testing.T, m *Model, data any, shape []int64, want []float32, what string) {
	check := func(outs []torch.Output, err error, closedOK bool) bool {
		if err != nil {
			if !closedOK || !(errors.Is(err, torch.ErrClosed) || errors.Is(err, torch.ErrThreadClosed) || errors.Is(err, errSessionClosed)) {
				t.Errorf("%s: Predict: %v", what, err)
			}
			return false
		}
		defer torch.CloseOutputs(outs)
		got, err := outs[0].Tensor.Float32s()
		if err != nil || len(got) != len(want) {
			t.Errorf("%s: Predict's output: %v (%d values, want %d)", what, err, len(got), len(want))
			return false
		}
		for i := range want {
			if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
				t.Errorf("%s: Predict's output %d = %v, PyTorch's %v", what, i, got[i], want[i])
				return false
			}
		}
		return true
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	half := make(chan struct{}) // closed when 60 of the 180 Predicts have returned their output
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Even goroutines share the model's thread; odd ones run a session on a thread of its
			// own and close it half-way while another goroutine still calls it.
			var s *Session
			if g%2 == 1 {
				var err error
				if s, err = m.NewSession(SessionOptions{OwnThread: true}); err != nil {
					t.Error(err)
					return
				}
				defer s.Close()
			}
			var inner sync.WaitGroup
			for k := 0; k < 2; k++ {
				inner.Add(1)
				go func() {
					defer inner.Done()
					for i := 0; i < 15; i++ {
						x, err := torch.NewTensorAny(data, shape)
						if err != nil {
							t.Error(err)
							return
						}
						var outs []torch.Output
						if s != nil {
							if k == 1 && i == 7 {
								s.Close()
							}
							outs, err = s.Predict(x)
						} else {
							outs, err = m.Predict(x)
						}
						x.Close()
						if check(outs, err, true) {
							mu.Lock()
							if ran++; ran == 60 {
								close(half)
							}
							mu.Unlock()
						}
					}
				}()
			}
			inner.Wait()
		}()
	}
	select {
	case <-half:
	case <-time.After(time.Minute):
	}
	m.Close() // racing the Predicts still running: each runs or reports ErrClosed
	wg.Wait()
	if ran < 60 {
		t.Errorf("%s: %d Predicts ran, want 60 or more (the session ones close half-way, the model after 60)", what, ran)
	}
}
