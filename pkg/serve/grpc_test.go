package serve

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/torchspeed/torchspeed/pkg/serve/inferencepb"
)

// startGRPC serves s over gRPC on a loopback port and returns a client of it; both stop when the
// test ends.
func startGRPC(t testing.TB, s *Server) pb.GRPCInferenceServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.NewGRPCServer()
	go g.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); g.Stop() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

func rawFloats(x []float32) []byte {
	b := make([]byte, 0, 4*len(x))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func floatsOfRaw(t testing.TB, b []byte) []float32 {
	t.Helper()
	if len(b)%4 != 0 {
		t.Fatalf("raw output of %d bytes is not FP32", len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// rawRequest is a ModelInfer request for the digits model with its input as raw bytes, as
// Triton's clients send it.
func rawRequest(x []float32, shape []int64) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{
		ModelName: "digits", Id: "g1",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: shape}},
		RawInputContents: [][]byte{rawFloats(x)},
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Every rpc of GRPCInferenceService, on the digits artifact.
func TestGRPCEndpoints(t *testing.T) {
	m := digitsArtifact(t)
	s, url := startServer(t, m, Config{})
	c := startGRPC(t, s)
	ctx := ctxT(t)
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("ServerLive: %v %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ServerReady: %v %v", r, err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "digits", Version: "1"}); err != nil || !r.Ready {
		t.Errorf("ModelReady: %v %v", r, err)
	}
	if _, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "mnist"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelReady of an unknown model: %v, want NOT_FOUND", err)
	}
	if r, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{}); err != nil || r.Name != "torchspeed" || !slices.Contains(r.Extensions, "binary_tensor_data") {
		t.Errorf("ServerMetadata: %v %v", r, err)
	}
	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits"})
	if err != nil {
		t.Fatal(err)
	}
	if md.Platform != Platform || len(md.Inputs) != 1 || md.Inputs[0].Name != "x" || md.Inputs[0].Datatype != "FP32" ||
		!slices.Equal(md.Inputs[0].Shape, []int64{-1, 1, 8, 8}) || len(md.Outputs) != 1 || !slices.Equal(md.Outputs[0].Shape, []int64{-1, 10}) {
		t.Errorf("ModelMetadata: %v", md)
	}
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits", Version: "2"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `no version "2"`) {
		t.Errorf("ModelMetadata of version 2: %v, want NOT_FOUND", err)
	}

	x := digitsInput(t)
	want := predictDirect(t, m, x, []int64{1, 1, 8, 8})
	r, err := c.ModelInfer(ctx, rawRequest(x, []int64{1, 1, 8, 8}))
	if err != nil {
		t.Fatal(err)
	}
	if r.ModelName != "digits" || r.Id != "g1" || len(r.Outputs) != 1 || len(r.RawOutputContents) != 1 ||
		r.Outputs[0].Datatype != "FP32" || !slices.Equal(r.Outputs[0].Shape, []int64{1, 10}) {
		t.Fatalf("ModelInfer (raw): %v", r)
	}
	if got := floatsOfRaw(t, r.RawOutputContents[0]); !slices.Equal(got, want) {
		t.Errorf("ModelInfer (raw) answered %v, the library %v", got, want)
	}
	typed := &pb.ModelInferRequest{ModelName: "digits", ModelVersion: "1", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 1, 8, 8}, Contents: &pb.InferTensorContents{Fp32Contents: x}},
	}, Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: md.Outputs[0].Name}}}
	r, err = c.ModelInfer(ctx, typed)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.RawOutputContents) != 0 || len(r.Outputs) != 1 || !slices.Equal(r.Outputs[0].GetContents().GetFp32Contents(), want) {
		t.Errorf("ModelInfer (typed contents): %v, want fp32_contents %v", r, want)
	}
	// A batch of three: rows answer as one-sample calls do.
	batch := slices.Concat(x, x, x)
	r, err = c.ModelInfer(ctx, rawRequest(batch, []int64{3, 1, 8, 8}))
	if err != nil {
		t.Fatal(err)
	}
	if got := floatsOfRaw(t, r.RawOutputContents[0]); len(got) != 30 || !close32(got[20:], want) {
		t.Errorf("batch of 3: %v", got)
	}
	// gRPC requests count in the REST metrics, under the HTTP status of the same outcome.
	if _, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "mnist"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelInfer of an unknown model: %v, want NOT_FOUND", err)
	}
	_, metrics := do(t, &http.Client{Timeout: 30 * time.Second}, "GET", url+"/metrics", nil)
	for _, want := range []string{
		`torchspeed_inference_requests_total{model="digits",code="200"} 3`,
		`torchspeed_inference_requests_total{model="(unknown)",code="404"} 1`,
		`torchspeed_inference_duration_seconds_count{model="digits"} 3`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}

// Malformed requests are refused with INVALID_ARGUMENT (or NOT_FOUND, RESOURCE_EXHAUSTED) and a
// message naming what is wrong, before anything reaches libtorch.
func TestGRPCBadRequests(t *testing.T) {
	m := digitsArtifact(t)
	s, _ := startServer(t, m, Config{MaxRequestBytes: 4096})
	c := startGRPC(t, s)
	ctx := ctxT(t)
	x := digitsInput(t)
	good := func(mod func(r *pb.ModelInferRequest)) *pb.ModelInferRequest {
		r := rawRequest(x, []int64{1, 1, 8, 8})
		mod(r)
		return r
	}
	typed := func(c *pb.InferTensorContents) func(r *pb.ModelInferRequest) {
		return func(r *pb.ModelInferRequest) { r.RawInputContents = nil; r.Inputs[0].Contents = c }
	}
	for _, tc := range []struct {
		name string
		req  *pb.ModelInferRequest
		want codes.Code
		msg  string
	}{
		{"no inputs", &pb.ModelInferRequest{ModelName: "digits"}, codes.InvalidArgument, "request has no inputs"},
		{"unknown model", good(func(r *pb.ModelInferRequest) { r.ModelName = "mnist" }), codes.NotFound, `unknown model "mnist"`},
		{"unknown version", good(func(r *pb.ModelInferRequest) { r.ModelVersion = "7" }), codes.NotFound, `no version "7"`},
		{"wrong input name", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Name = "y" }), codes.InvalidArgument, `no input "y": its inputs are x FP32 [-1 1 8 8]`},
		{"unnamed input", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Name = "" }), codes.InvalidArgument, "input 0 has no name"},
		{"input twice", good(func(r *pb.ModelInferRequest) {
			r.Inputs = append(r.Inputs, r.Inputs[0])
			r.RawInputContents = append(r.RawInputContents, r.RawInputContents[0])
		}), codes.InvalidArgument, "input x is given twice"},
		{"wrong datatype", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "FP64" }), codes.InvalidArgument, `datatype "FP64", the model takes FP32`},
		{"wrong dimension", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 1, 8, 9} }), codes.InvalidArgument, "dimension 3 is 9, the model takes 8"},
		{"negative batch", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{-1, 1, 8, 8} }), codes.InvalidArgument, "batch dimension 0 is -1"},
		{"huge batch", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1 << 40, 1, 8, 8} }), codes.InvalidArgument, "2^31 elements or more"},
		{"raw too short", good(func(r *pb.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][:10] }), codes.InvalidArgument, "raw_input_contents holds 10 bytes, shape and datatype need 256"},
		{"raw for some inputs", good(func(r *pb.ModelInferRequest) { r.RawInputContents = append(r.RawInputContents, nil) }), codes.InvalidArgument, "raw_input_contents has 2 entries for 1 inputs"},
		{"raw and contents", good(func(r *pb.ModelInferRequest) { r.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: x} }), codes.InvalidArgument, "both contents and raw_input_contents"},
		{"no data", good(typed(nil)), codes.InvalidArgument, "no contents and no raw_input_contents"},
		{"contents of another type", good(typed(&pb.InferTensorContents{IntContents: make([]int32, 64)})), codes.InvalidArgument, "contents has int_contents, datatype FP32 takes fp32_contents"},
		{"too few contents", good(typed(&pb.InferTensorContents{Fp32Contents: x[:3]})), codes.InvalidArgument, "contents.fp32_contents has 3 elements, the shape holds 64"},
		{"unknown output", good(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}
		}), codes.InvalidArgument, `no output "logits"`},
		{"over the size limit", good(func(r *pb.ModelInferRequest) { r.RawInputContents[0] = make([]byte, 8192) }), codes.ResourceExhausted, "larger than max"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			_, err := c.ModelInfer(ctx, tc.req)
			if status.Code(err) != tc.want || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Errorf("got %v, want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
	// The server still answers after all of them.
	if _, err := c.ModelInfer(ctx, rawRequest(x, []int64{1, 1, 8, 8})); err != nil {
		t.Errorf("a good request after the bad ones: %v", err)
	}
}

// Typed contents of every datatype reach the model as that datatype, out-of-range values are
// refused rather than wrapped.
func TestFromContents(t *testing.T) {
	for _, tc := range []struct {
		datatype string
		c        *pb.InferTensorContents
		want     any
		err      string
	}{
		{"INT8", &pb.InferTensorContents{IntContents: []int32{-128, 127}}, []int8{-128, 127}, ""},
		{"INT8", &pb.InferTensorContents{IntContents: []int32{1, 128}}, nil, "element 1 is 128, out of the datatype's range -128 to 127"},
		{"INT16", &pb.InferTensorContents{IntContents: []int32{-32768, 5}}, []int16{-32768, 5}, ""},
		{"INT32", &pb.InferTensorContents{IntContents: []int32{-7, 9}}, []int32{-7, 9}, ""},
		{"INT64", &pb.InferTensorContents{Int64Contents: []int64{1 << 40, -1}}, []int64{1 << 40, -1}, ""},
		{"UINT8", &pb.InferTensorContents{UintContents: []uint32{0, 255}}, []uint8{0, 255}, ""},
		{"UINT8", &pb.InferTensorContents{UintContents: []uint32{0, 256}}, nil, "element 1 is 256"},
		{"BOOL", &pb.InferTensorContents{BoolContents: []bool{true, false}}, []bool{true, false}, ""},
		{"FP64", &pb.InferTensorContents{Fp64Contents: []float64{0.5, -2}}, []float64{0.5, -2}, ""},
		{"FP64", &pb.InferTensorContents{Fp32Contents: []float32{0.5, -2}}, nil, "datatype FP64 takes fp64_contents"},
	} {
		dt, err := dtypeOf(tc.datatype)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fromContents(dt, tc.c, 2)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %v: %v, want an error with %q", tc.datatype, tc.c, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", tc.want) {
			t.Errorf("%s %v: %T %v %v, want %T %v", tc.datatype, tc.c, got, got, err, tc.want, tc.want)
		}
		// And back: what toContents writes, fromContents reads.
		if back, err := fromContents(dt, toContents(got), 2); err != nil || fmt.Sprint(back) != fmt.Sprint(got) {
			t.Errorf("%s: round trip %v gave %v %v", tc.datatype, got, back, err)
		}
	}
}

// With the one instance busy and the queue full, ModelInfer answers RESOURCE_EXHAUSTED at once.
func TestGRPCQueueFull(t *testing.T) {
	m := digitsArtifact(t)
	s, _ := startServer(t, m, Config{MaxQueue: 1})
	c := startGRPC(t, s)
	ctx := ctxT(t)
	req := rawRequest(digitsInput(t), []int64{1, 1, 8, 8})
	sess := <-s.free // the instance is busy
	first := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, req)
		first <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); s.waiting.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never queued")
		}
	}
	_, err := c.ModelInfer(ctx, req)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "queue full (1 waiting, --max-queue)") {
		t.Errorf("with the queue full: %v, want RESOURCE_EXHAUSTED naming the queue", err)
	}
	s.free <- sess
	if err := <-first; err != nil {
		t.Errorf("the queued request: %v", err)
	}
}

// Eight gRPC clients on one connection for about 3 s: every answer arrives and is the
// library's, bit for bit; p50 and p99 go to the test log.
func TestGRPCLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	m := digitsArtifact(t)
	s, _ := startServer(t, m, Config{Instances: 2, MaxQueue: 64})
	c := startGRPC(t, s)
	x := digitsInput(t)
	want := predictDirect(t, m, x, []int64{1, 1, 8, 8})
	req := rawRequest(x, []int64{1, 1, 8, 8})
	const clients = 8
	stop := time.Now().Add(3 * time.Second)
	var mu sync.Mutex
	var lat []time.Duration
	var bad []string
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for n := 0; n < 20000 && time.Now().Before(stop); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				r, err := c.ModelInfer(ctx, req)
				mine = append(mine, time.Since(t0))
				cancel()
				var got []float32
				if err == nil && len(r.RawOutputContents) == 1 {
					got = floatsOfRaw(t, r.RawOutputContents[0])
				}
				if !slices.Equal(got, want) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%v %v", err, got))
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d wrong or lost answers, first: %s", len(bad), bad[0])
	}
	if len(lat) < clients {
		t.Fatalf("only %d answers", len(lat))
	}
	slices.Sort(lat)
	t.Logf("gRPC: %d requests from %d clients in ~3 s on 2 instances: p50 %v, p99 %v, max %v", len(lat), clients,
		lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
}

// Shutdown with gRPC clients in flight: each call is answered OK or UNAVAILABLE, none is lost,
// each client is refused once the drain began, and GracefulStop returns once the answers are
// out.
func TestGRPCShutdownDrains(t *testing.T) {
	m := digitsArtifact(t)
	s, _ := startServer(t, m, Config{Instances: 1, MaxQueue: 64})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.NewGRPCServer()
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	req := rawRequest(digitsInput(t), []int64{1, 1, 8, 8})
	const clients = 16
	results := make(chan codes.Code, clients*10000)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Until the drain refuses it: each client ends with one UNAVAILABLE.
			for n := 0; n < 10000; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.ModelInfer(ctx, req)
				cancel()
				results <- status.Code(err)
				if status.Code(err) == codes.Unavailable {
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || r.Ready {
		t.Errorf("ServerReady while draining: %v %v, want false", r, err)
	}
	stopGRPC(ctx, g)
	wg.Wait()
	close(results)
	count := map[codes.Code]int{}
	for c := range results {
		count[c]++
	}
	if len(count) > 2 || count[codes.OK] == 0 || count[codes.Unavailable] != clients || count[codes.OK]+count[codes.Unavailable] != sumCounts(count) {
		t.Errorf("answers by code: %v: want only OK and UNAVAILABLE", count)
	}
	t.Logf("answers by code during the drain: %v", count)
	if err := <-served; err != nil {
		t.Errorf("Serve after GracefulStop: %v", err)
	}
}

func sumCounts(m map[codes.Code]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
