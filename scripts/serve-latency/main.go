// Command serve-latency times batch-1 requests to Open Inference Protocol servers from another
// process, as a user's client sees them: one keep-alive REST client (JSON) and one gRPC client
// (raw contents) per server, every route in turn, rounds interleaved so that a busy machine
// slows all alike. It prints p50 and p95 per route. It needs no torchspeed build: any server
// speaking the protocol (torchspeed serve, Triton) will do.
//
//	go run ./scripts/serve-latency -model digits -input build/fixtures/digits_in_x.npy \
//	    -rest http://127.0.0.1:8000,http://127.0.0.1:8010 -grpc 127.0.0.1:8001,127.0.0.1:8011
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/torchspeed/torchspeed/pkg/npy"
	pb "github.com/torchspeed/torchspeed/pkg/serve/inferencepb"
)

type route struct {
	name string
	call func() error
	d    []time.Duration
}

func main() {
	model := flag.String("model", "", "model name in the servers' URLs (required)")
	input := flag.String("input", "", "the input, a float32 .npy file (required)")
	inName := flag.String("input-name", "x", "the input's name")
	rest := flag.String("rest", "", "REST base URLs, comma-separated (http://HOST:PORT)")
	grpcAddrs := flag.String("grpc", "", "gRPC addresses, comma-separated (HOST:PORT)")
	calls := flag.Int("calls", 200, "calls per route per round")
	rounds := flag.Int("rounds", 10, "rounds")
	flag.Parse()
	if err := run(*model, *input, *inName, split(*rest), split(*grpcAddrs), *calls, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "serve-latency:", err)
		os.Exit(2)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(model, input, inName string, rest, grpcAddrs []string, calls, rounds int) error {
	switch {
	case model == "" || input == "":
		return fmt.Errorf("give -model NAME and -input FILE.npy")
	case len(rest)+len(grpcAddrs) == 0:
		return fmt.Errorf("give at least one server with -rest or -grpc")
	case calls < 1 || rounds < 1 || calls > 1_000_000 || rounds > 10_000:
		return fmt.Errorf("-calls %d, -rounds %d: give 1 to 1000000 calls and 1 to 10000 rounds", calls, rounds)
	}
	a, err := npy.ReadFile(input)
	if err != nil {
		return fmt.Errorf("input %s: %w", input, err)
	}
	x, err := a.Float32s()
	if err != nil {
		return fmt.Errorf("input %s: %w", input, err)
	}
	var routes []*route
	for _, u := range rest {
		routes = append(routes, restRoute(u, model, inName, a.Shape, x))
	}
	for _, addr := range grpcAddrs {
		r, err := grpcRoute(addr, model, inName, a.Shape, x)
		if err != nil {
			return err
		}
		routes = append(routes, r)
	}
	for _, r := range routes { // warm every route and connection
		for i := 0; i < 50; i++ {
			if err := r.call(); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}
	for range rounds {
		for _, r := range routes {
			for range calls {
				t0 := time.Now()
				if err := r.call(); err != nil {
					return fmt.Errorf("%s: %w", r.name, err)
				}
				r.d = append(r.d, time.Since(t0))
			}
		}
	}
	for _, r := range routes {
		slices.Sort(r.d)
		q := func(p float64) float64 { return float64(r.d[int(p*float64(len(r.d)-1))]) / 1e3 }
		fmt.Printf("%-40s p50 %7.1f us  p95 %7.1f us  (%d calls)\n", r.name, q(0.5), q(0.95), len(r.d))
	}
	return nil
}

func restRoute(base, model, inName string, shape []int64, x []float32) *route {
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": inName, "shape": shape, "datatype": "FP32", "data": x}}})
	url := strings.TrimSuffix(base, "/") + "/v2/models/" + model + "/infer"
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
	return &route{name: "REST " + base, call: func() error {
		resp, err := c.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: HTTP %d: %.200s", url, resp.StatusCode, b)
		}
		return nil
	}}
}

func grpcRoute(addr, model, inName string, shape []int64, x []float32) (*route, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gRPC %s: %w", addr, err)
	}
	c := pb.NewGRPCInferenceServiceClient(conn)
	raw := make([]byte, 0, 4*len(x))
	for _, v := range x {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	req := &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: inName, Datatype: "FP32", Shape: shape}}, RawInputContents: [][]byte{raw}}
	ctx := context.Background()
	return &route{name: "gRPC " + addr, call: func() error {
		_, err := c.ModelInfer(ctx, req)
		return err
	}}, nil
}
