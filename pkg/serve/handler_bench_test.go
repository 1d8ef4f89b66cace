package serve

import (
	"bytes"
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
			ins, err := s.inputTensors(req.Inputs, nil)
			if err != nil {
				b.Fatal(err)
			}
			ins[0].Close()
		}
	})
	b.Run("run-only", func(b *testing.B) {
		var req InferRequest
		decodeRequest(body, &req)
		ins, _ := s.inputTensors(req.Inputs, nil)
		for i := 0; i < b.N; i++ {
			outs, err := s.run(ins)
			if err != nil {
				b.Fatal(err)
			}
			torch.CloseOutputs(outs)
		}
	})
}
