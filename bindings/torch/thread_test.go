package torch_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
)

// Thread.Forward hands the inputs to the thread's C side: the outputs are PyTorch's, the same as
// ForwardOnThisThread's on that thread, and its errors are ForwardOnThisThread's.
func TestThreadForward(t *testing.T) {
	for _, name := range []string{"digits", "multi_nested"} {
		f := fixtures.Load(t).Get(t, name)
		m := loadFixture(t, f)
		in := tensorsOf(t, f.InputArrays(t))
		th := torch.NewThread()
		defer th.Close()
		for range 3 {
			outs, err := th.Forward(m, in...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkOutputs(t, f, outs, crossPathTol)
			torch.CloseOutputs(outs)
		}
		var direct []torch.Output
		var derr error
		if err := th.Do(func() { direct, derr = m.ForwardOnThisThread(in...) }); err != nil || derr != nil {
			t.Fatalf("%s: Do %v, forward %v", name, err, derr)
		}
		checkOutputs(t, f, direct, crossPathTol)
		torch.CloseOutputs(direct)
	}

	f := fixtures.Load(t).Get(t, "digits")
	m := loadFixture(t, f)
	bad, err := torch.NewTensor(make([]float32, 5), []int64{1, 5})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	th := torch.NewThread()
	defer th.Close()
	_, err = th.Forward(m, bad)
	var viaWorker *torch.Error
	if !errors.As(err, &viaWorker) || viaWorker.Code != torch.ModelError || !strings.Contains(err.Error(), "float32[1 5]") {
		t.Fatalf("wrong-shaped input through Thread.Forward: %v, want a model error naming the input", err)
	}
	var onThread error
	if err := th.Do(func() { _, onThread = m.ForwardOnThisThread(bad) }); err != nil {
		t.Fatal(err)
	}
	if onThread == nil || onThread.Error() != err.Error() {
		t.Errorf("Thread.Forward's error %q, ForwardOnThisThread's %q", err, onThread)
	}
	if _, err := th.Forward(m, nil); err == nil || !strings.Contains(err.Error(), "input 0 is nil") {
		t.Errorf("nil input: %v", err)
	}

	var zero torch.Thread
	if _, err := zero.Forward(m, bad); err == nil {
		t.Error("Forward on a zero-value Thread: no error")
	}
	if err := zero.Do(func() {}); err == nil {
		t.Error("Do on a zero-value Thread: no error")
	}
	if err := zero.Close(); err != nil {
		t.Error(err)
	}
}

// Forwards and Do functions from many goroutines share the thread, and Close waits for the calls
// in flight: each call either runs to completion with the right output or reports
// ErrThreadClosed (run under -race). Under every hand-off spin setting: both sides sleeping at
// once, spins so short that each side gives up and sleeps just as the other posts (the lost
// wake-up window), the defaults, and spins longer than any forward (callers and the thread
// never sleep while work comes).
func TestConcurrentThreadForwardAndClose(t *testing.T) {
	m, in, want := digitsReference(t)
	serve, wait := torch.HandoffSpin()
	defer func() {
		if err := torch.SetHandoffSpin(serve, wait); err != nil {
			t.Error(err)
		}
	}()
	if err := torch.SetHandoffSpin(-1, 0); err == nil {
		t.Error("SetHandoffSpin(-1, 0): no error")
	}
	if s, w := torch.HandoffSpin(); s != serve || w != wait {
		t.Errorf("a refused SetHandoffSpin changed the spins to %v, %v", s, w)
	}
	for _, spin := range [][2]time.Duration{{0, 0}, {time.Microsecond, time.Microsecond}, {serve, wait}, {20 * time.Millisecond, 20 * time.Millisecond}} {
		if err := torch.SetHandoffSpin(spin[0], spin[1]); err != nil {
			t.Fatal(err)
		}
		if s, w := torch.HandoffSpin(); s != spin[0] || w != spin[1] {
			t.Fatalf("HandoffSpin() = %v, %v after SetHandoffSpin(%v, %v)", s, w, spin[0], spin[1])
		}
		forwardsDoAndClose(t, m, in, want, fmt.Sprintf("spins %v/%v", spin[0], spin[1]))
	}
}

func forwardsDoAndClose(t *testing.T, m *torch.Module, in []*torch.Tensor, want []float32, what string) {
	for round := 0; round < 8; round++ {
		within(t, 60*time.Second, what+": forwards, Do and Close on one thread", func() {
			th := torch.NewThread()
			var wg sync.WaitGroup
			var mu sync.Mutex
			ran, refused := 0, 0
			for g := 0; g < 6; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						var err error
						if (g+i)%3 == 0 {
							err = th.Do(func() { time.Sleep(10 * time.Microsecond) })
						} else {
							var outs []torch.Output
							outs, err = th.Forward(m, in...)
							if err == nil {
								got, _ := outs[0].Tensor.Float32s()
								torch.CloseOutputs(outs)
								for j := range want {
									if got[j] != want[j] {
										t.Errorf("%s: Thread.Forward's output differs from Forward's", what)
										return
									}
								}
							}
						}
						mu.Lock()
						switch {
						case err == nil:
							ran++
						case errors.Is(err, torch.ErrThreadClosed):
							refused++
						default:
							t.Error(err)
						}
						mu.Unlock()
					}
				}()
			}
			if round%2 == 1 {
				time.Sleep(time.Duration(round) * 50 * time.Microsecond)
				th.Close()
			}
			wg.Wait()
			th.Close()
			if ran+refused != 60 {
				t.Errorf("%d calls ran and %d were refused, want 60 in all", ran, refused)
			}
			if round%2 == 0 && refused != 0 {
				t.Errorf("%d calls refused before Close", refused)
			}
			if _, err := th.Forward(m, in...); !errors.Is(err, torch.ErrThreadClosed) {
				t.Errorf("Forward after Close: %v", err)
			}
		})
	}
}

// osThreads counts the process's OS threads (Linux: /proc/self/task).
func osThreads(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skipf("no /proc/self/task: %v", err)
	}
	return len(ents)
}

// Copies and conversions made off the inference threads run with a one-thread OpenMP team:
// with 2 threads set, a channels-last copy and a float conversion of a big tensor on a fresh
// locked OS thread start no OpenMP worker. libgomp keeps a pool for every thread that runs a
// parallel region, and once the pools' threads outnumber the CPUs the inference pool's workers
// sleep between forwards. Without the one-thread team the first of these calls starts a pool
// (one more thread at 2 threads) on a thread that had none. The count, not the ids: ATen's
// first call on a thread re-creates its pthreadpool (at::set_num_threads), which replaces a
// worker. Go may start an OS thread of its own in the window, so the check is made on three
// fresh threads and fails when two or more grew.
func TestCopiesOffInferenceThreadsStartNoPool(t *testing.T) {
	if err := torch.SetNumThreads(2); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = torch.SetNumThreads(1) }()
	const c, h, w = 64, 128, 128 // 1M elements: far past ATen's parallel grain size
	x, err := torch.NewTensor(make([]float32, c*h*w), []int64{1, c, h, w})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	xd, err := torch.NewTensor(make([]float64, c*h*w), []int64{1, c, h, w})
	if err != nil {
		t.Fatal(err)
	}
	defer xd.Close()
	attempt := func() (added int, err error) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Never unlocked: the OS thread ends with the goroutine, so the next attempt runs
			// on another one.
			runtime.LockOSThread()
			before := osThreads(t)
			cl, e := x.ChannelsLast()
			if e != nil {
				err = e
				return
			}
			cl.Close()
			f, e := xd.Float()
			if e != nil {
				err = e
				return
			}
			f.Close()
			added = osThreads(t) - before
		}()
		<-done
		return added, err
	}
	// The threads of an attempt's OS thread (and of any pool it had) exit after it: wait for
	// the count to settle before the next one.
	settle := func() {
		last := osThreads(t)
		for range 40 {
			time.Sleep(25 * time.Millisecond)
			n := osThreads(t)
			if n == last {
				return
			}
			last = n
		}
	}
	grew := 0
	var seen []int
	for range 3 {
		settle()
		added, err := attempt()
		if err != nil {
			t.Fatal(err)
		}
		if added > 0 {
			grew++
		}
		seen = append(seen, added)
	}
	t.Logf("threads added per attempt: %v", seen)
	if grew >= 2 {
		t.Fatalf("copies off the inference threads started OS threads (OpenMP pools) on %d of 3 fresh threads: %v new threads", grew, seen)
	}
}

// Switching a thread's count back and forth ends no OS thread. at::set_num_threads replaces
// libtorch's pthreadpool, ending its threads and starting new ones that spin ~20 ms each: a
// thread-count measurement that switched counts block by block that way had 26 of them a
// second spinning beside the measured team, and timed resnet18 INT8 at 2 threads at 7 ms
// instead of 3.4 (optimize then kept 1 thread). SetNumThreadsOnThisThread sets the thread's
// own count only.
func TestSwitchingCountsEndsNoThread(t *testing.T) {
	if torch.AvailableCPUs() < 2 {
		t.Skip("needs 2 CPUs: switching between 1 and 2 threads is the case")
	}
	defer func() { _ = torch.SetNumThreads(1) }()
	tids := func() map[string]bool {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Skipf("no /proc/self/task: %v", err)
		}
		m := map[string]bool{}
		for _, e := range ents {
			m[e.Name()] = true
		}
		return m
	}
	var ended []string
	var ferr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the test's goroutine
		// ATen's first call on a thread sets its count the process-wide way: before the snapshot.
		if ferr = torch.SetNumThreadsOnThisThread(2); ferr != nil {
			return
		}
		before := tids()
		for i := range 6 {
			if ferr = torch.SetNumThreadsOnThisThread(1 + i%2); ferr != nil {
				return
			}
			if got := torch.NumThreadsOnThisThread(); got != 1+i%2 {
				ferr = fmt.Errorf("set %d threads on this thread, it has %d", 1+i%2, got)
				return
			}
		}
		after := tids()
		for id := range before {
			if !after[id] {
				ended = append(ended, id)
			}
		}
	}()
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
	if len(ended) > 0 {
		t.Errorf("switching the count 6 times on one thread ended OS threads %v (a pool restarted)", ended)
	}
}
