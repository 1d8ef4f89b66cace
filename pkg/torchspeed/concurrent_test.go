package torchspeed

import (
	"sync"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// Items 1 and 4 through Predict: a Predict with a wrong-shape input while another goroutine
// closes that input, and thread counts changed while Predicts run, neither hang (the error
// path once re-took the input's guard under a waiting Close, stopping the shared inference
// thread and every other model's Predict with it) nor panic.
func TestHostile01PredictWhileItsInputCloses(t *testing.T) {
	defer torch.SetNumThreads(1)
	a, err := Load(saveWithManifest(t, goodManifest()), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Load(saveWithManifest(t, goodManifest()), LoadOptions{KeepThreads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	good, err := torch.NewTensor(make([]float32, 64), []int64{1, 1, 8, 8})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	avail := torch.AvailableCPUs()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 50; i++ {
			bad, err := torch.NewTensor(make([]float32, 15), []int64{3, 5})
			if err != nil {
				t.Error(err)
				return
			}
			var wg sync.WaitGroup
			wg.Add(3)
			go func() {
				defer wg.Done()
				if outs, err := a.Predict(bad); err == nil {
					torch.CloseOutputs(outs)
					t.Error("a [3 5] input ran on the digits model")
				}
			}()
			go func() {
				defer wg.Done()
				bad.Close()
			}()
			go func() {
				defer wg.Done()
				if err := torch.SetNumThreads(1 + i%avail); err != nil {
					t.Error(err)
				}
			}()
			wg.Wait()
		}
		// The other model still answers.
		outs, err := b.Predict(good)
		if err != nil {
			t.Error(err)
			return
		}
		torch.CloseOutputs(outs)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Predicts with inputs closed under them: still running after 2 minutes (deadlock)")
	}
}
