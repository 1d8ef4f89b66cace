package serve

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// What serve adds to a call: one keep-alive HTTP client (JSON) and one gRPC client (raw
// contents), batch 1, the digits artifact at one thread, against the same model called through
// a session on its own thread (the path serve's instances take, without a protocol). Rounds
// interleave, so that a busy neighbour on a shared machine slows all alike; the clients run in
// this process, on the same CPUs as the server.
func TestServeOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	m := digitsArtifact(t)
	srv, url := startServer(t, m, Config{Instances: 1})
	gc := startGRPC(t, srv)
	x := digitsInput(t)
	body := inferBody(x, []int64{1, 1, 8, 8})
	sess, err := m.NewSession(torchspeed.SessionOptions{OwnThread: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	in, err := torch.NewTensor(x, []int64{1, 1, 8, 8})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
	const rounds, calls = 10, 200
	var direct, served, grpcServed, bare []time.Duration
	greq := rawRequest(x, []int64{1, 1, 8, 8})
	ctx := ctxT(t)
	post := func() {
		resp, err := c.Post(url+"/v2/models/digits/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("infer: %d", resp.StatusCode)
		}
	}
	for i := 0; i < 50; i++ { // warm both paths and the connection
		post()
	}
	for r := 0; r < rounds; r++ {
		for i := 0; i < calls; i++ {
			t0 := time.Now()
			outs, err := sess.Predict(in)
			direct = append(direct, time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			torch.CloseOutputs(outs)
		}
		for i := 0; i < calls; i++ {
			t0 := time.Now()
			post()
			served = append(served, time.Since(t0))
		}
		for i := 0; i < calls; i++ {
			t0 := time.Now()
			if _, err := gc.ModelInfer(ctx, greq); err != nil {
				t.Fatal(err)
			}
			grpcServed = append(grpcServed, time.Since(t0))
		}
		for i := 0; i < calls; i++ {
			t0 := time.Now()
			resp, err := c.Get(url + "/v2/health/live")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			bare = append(bare, time.Since(t0))
		}
	}
	slices.Sort(direct)
	slices.Sort(served)
	slices.Sort(bare)
	slices.Sort(grpcServed)
	p := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
	t.Logf("digits, batch 1, 1 thread, %d calls each: direct p50 %v p99 %v; serve (HTTP keep-alive, JSON) p50 %v p99 %v; overhead at p50 %v",
		len(direct), p(direct, 0.5), p(direct, 0.99), p(served, 0.5), p(served, 0.99), p(served, 0.5)-p(direct, 0.5))
	t.Logf("serve over gRPC (raw_input_contents): p50 %v p99 %v; overhead at p50 %v",
		p(grpcServed, 0.5), p(grpcServed, 0.99), p(grpcServed, 0.5)-p(direct, 0.5))
	t.Logf("an HTTP round trip that runs no model (GET /v2/health/live) on this machine: p50 %v p99 %v", p(bare, 0.5), p(bare, 0.99))
}
