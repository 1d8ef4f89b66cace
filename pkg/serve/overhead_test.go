package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// What serve adds to a call: one keep-alive HTTP client (JSON) and one gRPC client (raw
// contents), batch 1, the digits artifact at one thread, against the same model called as
// bench calls it (a session on the caller's locked thread) and through a session on its own
// thread. Both ways serve can run a request's forward are measured side by side: on the
// request's goroutine (what New picks at one thread) and handed to the instance's own thread.
// Rounds interleave, so that a busy neighbour on a shared machine slows all alike; the
// clients run in this process, on the same CPUs as the server. Run it with -v to read the
// figures; it fails only when a path fails.
func TestServeOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	m := digitsArtifact(t)
	x := digitsInput(t)
	paths := overheadPaths(t, m, x)
	const rounds, calls = 10, 200
	times := make([][]time.Duration, len(paths))
	switches := make([][2]int64, len(paths)) // voluntary, involuntary, all threads of the process
	for _, p := range paths {                // warm every path and connection
		for i := 0; i < 50; i++ {
			if err := p.call(); err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	for r := 0; r < rounds; r++ {
		for k, p := range paths {
			v0, i0 := contextSwitches(t)
			d, err := p.round(calls)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			v1, i1 := contextSwitches(t)
			switches[k][0] += v1 - v0
			switches[k][1] += i1 - i0
			times[k] = append(times[k], d...)
		}
	}
	t.Logf("digits, batch 1, 1 thread, %d rounds of %d calls per path, interleaved; overhead = p50 minus bench's p50, [95%% bootstrap interval]; the process's context switches per call, voluntary + involuntary", rounds, calls)
	for k, p := range paths {
		n := float64(rounds * calls)
		t.Logf("%-42s %s  switches/call %.1f + %.1f", p.name, summary(times[k], times[0]), float64(switches[k][0])/n, float64(switches[k][1])/n)
	}
}

// overheadPath is one way of running the model; the first, bench's, is the baseline.
type overheadPath struct {
	name  string
	call  func() error
	round func(n int) ([]time.Duration, error)
}

func timed(call func() error) func(int) ([]time.Duration, error) {
	return func(n int) ([]time.Duration, error) {
		d := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if err := call(); err != nil {
				return nil, err
			}
			d = append(d, time.Since(t0))
		}
		return d, nil
	}
}

// lockedRound runs a round on a goroutine locked to its thread, as bench's streams run: the
// test goroutine itself stays unlocked, so the clients' wake-ups are not made to wait for it.
func lockedRound(call func() error) func(int) ([]time.Duration, error) {
	return func(n int) ([]time.Duration, error) {
		var (
			d   []time.Duration
			err error
		)
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			d, err = timed(call)(n)
		}()
		<-done
		return d, err
	}
}

func overheadPaths(t *testing.T, m *torchspeed.Model, x []float32) []overheadPath {
	shape := []int64{1, 1, 8, 8}
	in, err := torch.NewTensor(x, shape)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	predict := func(opts torchspeed.SessionOptions) func() error {
		sess, err := m.NewSession(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		return func() error {
			outs, err := sess.Predict(in)
			torch.CloseOutputs(outs)
			return err
		}
	}
	bench, own := predict(torchspeed.SessionOptions{CallerThread: true}), predict(torchspeed.SessionOptions{OwnThread: true})
	paths := []overheadPath{
		{name: "bench (caller's locked thread)", call: bench, round: lockedRound(bench)},
		{name: "session on its own thread", call: own, round: timed(own)},
	}
	body := inferBody(x, shape)
	greq := rawRequest(x, shape)
	ctx := ctxT(t)
	for _, here := range []bool{true, false} {
		how := "forward on the request's goroutine"
		if !here {
			how = "forward handed to the instance"
		}
		srv, url := startServerWith(t, m, Config{Name: "digits", Instances: 1}, here)
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
		post := func() error {
			resp, err := c.Post(url+"/v2/models/digits/infer", "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("infer: HTTP %d", resp.StatusCode)
			}
			return nil
		}
		gc := startGRPC(t, srv)
		grpcCall := func() error { _, err := gc.ModelInfer(ctx, greq); return err }
		paths = append(paths,
			overheadPath{name: "REST, " + how, call: post, round: timed(post)},
			overheadPath{name: "gRPC, " + how, call: grpcCall, round: timed(grpcCall)})
		if here {
			live := func() error {
				resp, err := c.Get(url + "/v2/health/live")
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			}
			paths = append(paths, overheadPath{name: "REST GET /v2/health/live (no model)", call: live, round: timed(live)})
		}
	}
	return paths
}

// startServerWith is startServer with the thread the forwards run on chosen.
func startServerWith(t *testing.T, m *torchspeed.Model, cfg Config, here bool) (*Server, string) {
	s, err := newServer(m, cfg, here)
	if err != nil {
		t.Fatal(err)
	}
	srv, url := serveHTTP(t, s)
	return srv, url
}

// summary gives p50 and p95 of d, and its p50 over base's with a bootstrap 95% interval.
func summary(d, base []time.Duration) string {
	q := func(s []time.Duration, p float64) time.Duration {
		c := slices.Clone(s)
		slices.Sort(c)
		return c[int(p*float64(len(c)-1))]
	}
	over := q(d, 0.5) - q(base, 0.5)
	rng := rand.New(rand.NewPCG(1, 2))
	resample := func(s []time.Duration) []time.Duration {
		r := make([]time.Duration, len(s))
		for i := range r {
			r[i] = s[rng.IntN(len(s))]
		}
		return r
	}
	const boots = 500
	diffs := make([]time.Duration, boots)
	for i := range diffs {
		diffs[i] = q(resample(d), 0.5) - q(resample(base), 0.5)
	}
	return fmt.Sprintf("p50 %6.1f us  p95 %6.1f us  overhead %6.1f us [%.1f, %.1f]",
		us(q(d, 0.5)), us(q(d, 0.95)), us(over), us(q(diffs, 0.025)), us(q(diffs, 0.975)))
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// Where a REST request's time goes inside serve, without the network: each stage timed on its
// own, interleaved call by call, medians. The whole handler (httptest, no socket) against its
// stages, and the forward as bench runs it. Run it with -v; it fails only when a stage fails.
func TestServeBreakdown(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	m := digitsArtifact(t)
	x := digitsInput(t)
	s, _ := startServer(t, m, Config{Instances: 1})
	body := inferBody(x, []int64{1, 1, 8, 8})
	h := s.Handler()
	const n = 3000
	var stages [6][]time.Duration
	names := [...]string{"whole handler (httptest, no socket)", "decode JSON + check inputs", "make input tensors", "take an instance + forward", "read outputs", "encode JSON answer"}
	for i := 0; i < n+100; i++ {
		t0 := time.Now()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v2/models/digits/infer", bytes.NewReader(body)))
		t1 := time.Now()
		if w.Code != 200 {
			t.Fatalf("handler: %d %s", w.Code, w.Body)
		}
		var req InferRequest
		if err := decodeRequest(body, &req); err != nil {
			t.Fatal(err)
		}
		vals, err := s.inputValues(req.Inputs, nil)
		if err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		ins, err := tensorsOf(vals)
		if err != nil {
			t.Fatal(err)
		}
		t3 := time.Now()
		outs, err := s.run(context.Background(), ins)
		if err != nil {
			t.Fatal(err)
		}
		t4 := time.Now()
		ros, err := readOutputs(outs)
		if err != nil {
			t.Fatal(err)
		}
		t5 := time.Now()
		if _, err := json.Marshal(InferResponse{ModelName: "digits", Outputs: ros}); err != nil {
			t.Fatal(err)
		}
		t6 := time.Now()
		torch.CloseOutputs(outs)
		closeAll(ins)
		if i < 100 {
			continue
		}
		for k, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t5.Sub(t4), t6.Sub(t5)} {
			stages[k] = append(stages[k], d)
		}
	}
	for k, d := range stages {
		slices.Sort(d)
		t.Logf("%-38s p50 %6.1f us  p95 %6.1f us", names[k], us(d[len(d)/2]), us(d[len(d)*95/100]))
	}
	idleGap(t, s, body)
}

// idleGap times the forward back to back and after 50 us idle (the thread parks, as a server's
// does between requests), alternating: on a busy machine others run on the CPU meanwhile.
func idleGap(t *testing.T, s *Server, body []byte) {
	var req InferRequest
	if err := decodeRequest(body, &req); err != nil {
		t.Fatal(err)
	}
	vals, err := s.inputValues(req.Inputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := tensorsOf(vals)
	defer closeAll(ins)
	if err != nil {
		t.Fatal(err)
	}
	var gap [2][]time.Duration
	for i := 0; i < 4000; i++ {
		if i%2 == 1 {
			time.Sleep(50 * time.Microsecond)
		}
		t0 := time.Now()
		outs, err := s.run(context.Background(), ins)
		gap[i%2] = append(gap[i%2], time.Since(t0))
		if err != nil {
			t.Fatal(err)
		}
		torch.CloseOutputs(outs)
	}
	for k, what := range []string{"back to back", "after 50 us idle"} {
		d := gap[k]
		slices.Sort(d)
		t.Logf("%-38s p50 %6.1f us  p95 %6.1f us", "forward "+what, us(d[len(d)/2]), us(d[len(d)*95/100]))
	}
}

// contextSwitches counts the process's voluntary and involuntary context switches so far, all
// its threads together: a thread that sleeps and is woken again pays a wake-up, and on a busy
// machine the wait for a CPU after it.
func contextSwitches(t *testing.T) (voluntary, involuntary int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Nvcsw, ru.Nivcsw
}
