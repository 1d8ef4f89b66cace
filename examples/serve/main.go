// Command serve is an example Go service that embeds torchspeed: it loads one model with
// torchspeed.Load (re-applying the artifact's load-time passes and runtime settings) and
// answers HTTP requests with Predict, from many goroutines at once. SIGINT or SIGTERM stop it
// gracefully: requests in flight finish, then the model is closed.
//
// Build it against an installed library (make install PREFIX=P):
//
//	PKG_CONFIG_PATH=P/lib/pkgconfig go build -tags torchspeed_pkgconfig ./examples/serve
//
// API:
//
//	POST /v1/predict  {"inputs": [{"shape": [1, 1, 8, 8], "dtype": "float32", "data": [...]}]}
//	  -> {"outputs": [{"name": "0", "shape": [1, 10], "data": [...], "top1": [3]}]}
//	GET /healthz      -> 200 once the model is loaded
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// maxBody bounds a request body: a client cannot make the server buffer without limit.
const maxBody = 64 << 20

type inputJSON struct {
	Shape []int64         `json:"shape"`
	DType string          `json:"dtype"`
	Data  json.RawMessage `json:"data"`
}

type outputJSON struct {
	Name  string    `json:"name"`
	Shape []int64   `json:"shape"`
	Data  []float32 `json:"data"`
	// Top1 is the index of the largest value of each row (the last dimension).
	Top1 []int `json:"top1"`
}

type server struct{ model *torchspeed.Model }

func main() {
	modelPath := flag.String("model", "", "artifact from `torchspeed optimize` (or any TorchScript file)")
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (port 0: any free port)")
	threads := flag.Int("threads", 0, "intra-op threads (0: the artifact's measured count)")
	flag.Parse()
	if *modelPath == "" {
		fmt.Fprintln(os.Stderr, "serve: -model is required")
		os.Exit(2)
	}
	m, err := torchspeed.Load(*modelPath, torchspeed.LoadOptions{Threads: *threads})
	if err != nil {
		log.Fatalf("serve: %v", err)
	}
	for _, w := range m.Warnings {
		log.Printf("serve: %s", w)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		m.Close()
		log.Fatalf("serve: listen on %s: %v", *addr, err)
	}
	mux := http.NewServeMux()
	s := &server{model: m}
	mux.HandleFunc("POST /v1/predict", s.predict)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	// The test and scripts read the bound address from this line.
	fmt.Printf("listening on %s\n", ln.Addr())
	select {
	case err := <-done:
		m.Close()
		log.Fatalf("serve: %v", err)
	case <-ctx.Done():
	}
	log.Printf("serve: shutting down: finishing requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Printf("serve: shutdown: %v", err)
	}
	if err := m.Close(); err != nil {
		log.Printf("serve: closing the model: %v", err)
	}
}

func (s *server) predict(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Inputs []inputJSON `json:"inputs"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "request body: %v: send {\"inputs\": [{\"shape\": [...], \"dtype\": \"float32\", \"data\": [...]}]}", err)
		return
	}
	var ins []*torch.Tensor
	defer func() {
		for _, t := range ins {
			t.Close()
		}
	}()
	for i, in := range req.Inputs {
		t, err := tensorOf(in)
		if err != nil {
			httpError(w, http.StatusBadRequest, "input %d: %v", i, err)
			return
		}
		ins = append(ins, t)
	}
	outs, err := s.model.Predict(ins...)
	if err != nil {
		httpError(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	defer torch.CloseOutputs(outs)
	var resp struct {
		Outputs []outputJSON `json:"outputs"`
	}
	for _, o := range outs {
		f, err := o.Tensor.Float()
		if err != nil {
			httpError(w, http.StatusInternalServerError, "output %s: %v", o.Name, err)
			return
		}
		data, err := f.Float32s()
		f.Close()
		if err != nil {
			httpError(w, http.StatusInternalServerError, "output %s: %v", o.Name, err)
			return
		}
		shape := o.Tensor.Shape()
		resp.Outputs = append(resp.Outputs, outputJSON{Name: o.Name, Shape: shape, Data: data, Top1: top1(data, shape)})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// tensorOf checks an input's shape against its data before any of it reaches libtorch.
func tensorOf(in inputJSON) (*torch.Tensor, error) {
	n := int64(1)
	for _, d := range in.Shape {
		if d < 0 || (d > 0 && n > (1<<31)/d) {
			return nil, fmt.Errorf("shape %v: dimensions must be 0 or more, with under 2^31 elements", in.Shape)
		}
		n *= d
	}
	var data any
	switch in.DType {
	case "float32", "":
		var d []float32
		if err := json.Unmarshal(in.Data, &d); err != nil {
			return nil, fmt.Errorf("data: %v: give a flat list of numbers", err)
		}
		data = d
		if int64(len(d)) != n {
			return nil, fmt.Errorf("%d values for shape %v (%d elements)", len(d), in.Shape, n)
		}
	case "int64":
		var d []int64
		if err := json.Unmarshal(in.Data, &d); err != nil {
			return nil, fmt.Errorf("data: %v: give a flat list of integers", err)
		}
		data = d
		if int64(len(d)) != n {
			return nil, fmt.Errorf("%d values for shape %v (%d elements)", len(d), in.Shape, n)
		}
	default:
		return nil, fmt.Errorf("dtype %q: use float32 or int64", in.DType)
	}
	return torch.NewTensorAny(data, in.Shape)
}

// top1 is the argmax of each row along the last dimension.
func top1(data []float32, shape []int64) []int {
	if len(shape) == 0 || shape[len(shape)-1] == 0 {
		return nil
	}
	row := int(shape[len(shape)-1])
	var idx []int
	for off := 0; off+row <= len(data); off += row {
		best := 0
		for i := 1; i < row; i++ {
			if data[off+i] > data[off+best] {
				best = i
			}
		}
		idx = append(idx, best)
	}
	return idx
}

func httpError(w http.ResponseWriter, code int, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, a...)})
}
