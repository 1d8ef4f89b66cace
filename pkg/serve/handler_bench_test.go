package serve

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// BenchmarkInferHandler splits serve's own time per request (no network) into decoding and
// running; the rest of http-handler is encoding the answer and the metrics.
func BenchmarkInferHandler(b *testing.B) {
	m := digitsArtifact(b)
	s, _ := startServer(b, m, Config{})
	body := inferBody(digitsInput(b), []int64{1, 1, 8, 8})
	h := s.Handler()
	b.Run("http-handler", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("POST", "/v2/models/digits/infer", bytes.NewReader(body)))
			if w.Code != 200 {
				b.Fatal(w.Code)
			}
		}
	})
	b.Run("decode-only", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var req InferRequest
			if err := decodeRequest(body, &req); err != nil {
				b.Fatal(err)
			}
			vals, err := s.inputValues(req.Inputs, nil)
			if err != nil {
				b.Fatal(err)
			}
			ins, err := tensorsOf(vals)
			if err != nil {
				b.Fatal(err)
			}
			closeAll(ins)
		}
	})
	b.Run("run-only", func(b *testing.B) {
		var req InferRequest
		decodeRequest(body, &req)
		vals, _ := s.inputValues(req.Inputs, nil)
		ins, _ := tensorsOf(vals)
		defer closeAll(ins)
		for i := 0; i < b.N; i++ {
			outs, err := s.run(context.Background(), ins)
			if err != nil {
				b.Fatal(err)
			}
			torch.CloseOutputs(outs)
		}
	})
}
