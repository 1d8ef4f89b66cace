package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// digitsArtifact saves the digits fixture as an artifact measured at one thread, as optimize
// writes one, and returns it loaded.
func digitsArtifact(t testing.TB) *torchspeed.Model {
	t.Helper()
	mod, err := torch.Load(fixtures.Load(t).Get(t, "digits").ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	path := filepath.Join(t.TempDir(), "digits.torchspeed.pt")
	man := &torchspeed.Manifest{
		Format: version.ManifestFormat, Torchspeed: version.Version, Libtorch: torch.Version(), SourceName: "digits.pt",
		Inputs:     []torchspeed.InputSpec{{Name: "x", Shape: []int64{1, 1, 8, 8}, DType: "float32"}},
		LoadPasses: []string{}, Steps: []string{}, Precision: "fp32",
		Runtime: torchspeed.Runtime{Threads: 1, InteropThreads: 1},
	}
	if err := torchspeed.SaveArtifact(mod, path, man); err != nil {
		t.Fatal(err)
	}
	m, err := torchspeed.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// digitsInput is the fixture's saved input, flat.
func digitsInput(t testing.TB) []float32 {
	t.Helper()
	a := fixtures.Load(t).Get(t, "digits").InputArrays(t)[0]
	x, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// startServer serves m on a loopback port; the servers stop when the test ends.
func startServer(t testing.TB, m *torchspeed.Model, cfg Config) (*Server, string) {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "digits"
	}
	s, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveHTTP(t, s)
}

// serveHTTP serves s's REST endpoints on 127.0.0.1 until the test ends, then closes s.
func serveHTTP(t testing.TB, s *Server) (*Server, string) {
	hs := httptest.NewServer(s.Handler()) // listens on 127.0.0.1
	t.Cleanup(func() {
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, hs.URL
}

func inferBody(x []float32, shape []int64) []byte {
	b, _ := json.Marshal(map[string]any{"id": "r1", "inputs": []map[string]any{{"name": "x", "shape": shape, "datatype": "FP32", "data": x}}})
	return b
}

func do(t testing.TB, c *http.Client, method, url string, body []byte) (int, []byte) {
	t.Helper()
	code, b, err := try(c, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

// try is do for goroutines other than the test's, which must not call t.Fatal.
func try(c *http.Client, method, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// predictDirect is what the library answers on the same input.
func predictDirect(t testing.TB, m *torchspeed.Model, x []float32, shape []int64) []float32 {
	t.Helper()
	in, err := torch.NewTensor(x, shape)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outs, err := m.Predict(in)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseOutputs(outs)
	want, err := torch.Data[float32](outs[0].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

func TestEndpoints(t *testing.T) {
	m := digitsArtifact(t)
	_, url := startServer(t, m, Config{})
	c := &http.Client{Timeout: 30 * time.Second}
	for _, tc := range []struct {
		method, path string
		want         int
		contains     string
	}{
		{"GET", "/v2/health/live", 200, `"live":true`},
		{"GET", "/v2/health/ready", 200, `"ready":true`},
		{"GET", "/v2", 200, `"name":"torchspeed"`},
		{"GET", "/v2/models/digits", 200, `"platform":"pytorch_torchscript"`},
		{"GET", "/v2/models/digits/versions/1", 200, `"versions":["1"]`},
		{"GET", "/v2/models/digits/ready", 200, `"ready":true`},
		{"GET", "/v2/models/digits/versions/1/ready", 200, `"ready":true`},
		{"GET", "/v2/models/other", 404, `unknown model \"other\"`},
		{"GET", "/v2/models/other/ready", 404, `unknown model`},
		{"GET", "/v2/models/digits/versions/7", 404, `no version \"7\"`},
		{"GET", "/v1/predict", 404, `no endpoint GET /v1/predict`},
	} {
		code, body := do(t, c, tc.method, url+tc.path, nil)
		if code != tc.want || !strings.Contains(string(body), tc.contains) {
			t.Errorf("%s %s: %d %s, want %d with %s", tc.method, tc.path, code, body, tc.want, tc.contains)
		}
	}
	var md ModelMetadata
	_, body := do(t, c, "GET", url+"/v2/models/digits", nil)
	if err := json.Unmarshal(body, &md); err != nil {
		t.Fatal(err)
	}
	wantIn := []TensorMetadata{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 1, 8, 8}}}
	if md.Name != "digits" || fmt.Sprint(md.Inputs) != fmt.Sprint(wantIn) || len(md.Outputs) != 1 ||
		md.Outputs[0].Datatype != "FP32" || !slices.Equal(md.Outputs[0].Shape, []int64{-1, 10}) {
		t.Errorf("metadata %s: want input %v and one FP32 output [-1 10]", body, wantIn)
	}

	code, body := do(t, c, "POST", url+"/v2/models/digits/infer", inferBody(digitsInput(t), []int64{1, 1, 8, 8}))
	if code != 200 {
		t.Fatalf("infer: %d %s", code, body)
	}
	code, body = do(t, c, "POST", url+"/v2/models/digits/infer", []byte("{"))
	if code != 400 {
		t.Fatalf("bad infer: %d %s", code, body)
	}
	if code, _ := do(t, c, "POST", url+"/v2/models/random-name/infer", nil); code != 404 {
		t.Errorf("unknown model: %d", code)
	}
	code, body = do(t, c, "GET", url+"/metrics", nil)
	for _, want := range []string{
		`torchspeed_inference_requests_total{model="digits",code="200"} 1`,
		`torchspeed_inference_requests_total{model="digits",code="400"} 1`,
		`torchspeed_inference_duration_seconds_count{model="digits"} 2`,
		`torchspeed_queue_duration_seconds_count{model="digits"} 1`,
		"torchspeed_inference_in_flight 0",
		`torchspeed_inference_requests_total{model="(unknown)",code="404"} 1`,
		"torchspeed_queue_depth 0",
		"# TYPE torchspeed_inference_duration_seconds histogram",
	} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics (%d) lack %q:\n%s", code, want, body)
		}
	}
}

// The answers are the library's own, bit for bit, with data flat or nested and a batch of 2.
func TestInferMatchesPredict(t *testing.T) {
	m := digitsArtifact(t)
	_, url := startServer(t, m, Config{Instances: 2})
	c := &http.Client{Timeout: 30 * time.Second}
	x := digitsInput(t)
	x2 := append(slices.Clone(x), x...)
	for i := 64; i < 128; i++ {
		x2[i] *= 0.5
	}
	nested := make([][][][]float32, 1)
	nested[0] = make([][][]float32, 1)
	nested[0][0] = make([][]float32, 8)
	for r := 0; r < 8; r++ {
		nested[0][0][r] = x[r*8 : r*8+8]
	}
	nestedBody, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "x", "shape": []int{1, 1, 8, 8}, "datatype": "FP32", "data": nested}},
		"outputs": []map[string]any{{"name": md0(t, url, c)}}, "parameters": map[string]any{"priority": 1}})
	for _, tc := range []struct {
		name  string
		body  []byte
		x     []float32
		shape []int64
	}{
		{"flat", inferBody(x, []int64{1, 1, 8, 8}), x, []int64{1, 1, 8, 8}},
		{"nested", nestedBody, x, []int64{1, 1, 8, 8}},
		{"batch2", inferBody(x2, []int64{2, 1, 8, 8}), x2, []int64{2, 1, 8, 8}},
	} {
		code, body := do(t, c, "POST", url+"/v2/models/digits/infer", tc.body)
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.name, code, body)
		}
		var resp struct {
			ModelName string `json:"model_name"`
			Outputs   []struct {
				Name     string    `json:"name"`
				Shape    []int64   `json:"shape"`
				Datatype string    `json:"datatype"`
				Data     []float32 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		want := predictDirect(t, m, tc.x, tc.shape)
		if resp.ModelName != "digits" || len(resp.Outputs) != 1 || resp.Outputs[0].Datatype != "FP32" ||
			!slices.Equal(resp.Outputs[0].Shape, []int64{tc.shape[0], 10}) || !slices.Equal(resp.Outputs[0].Data, want) {
			t.Errorf("%s: answered %s, want FP32 [%d 10] %v", tc.name, body, tc.shape[0], want)
		}
	}
}

func md0(t testing.TB, url string, c *http.Client) string {
	var md ModelMetadata
	_, body := do(t, c, "GET", url+"/v2/models/digits", nil)
	if err := json.Unmarshal(body, &md); err != nil || len(md.Outputs) == 0 {
		t.Fatalf("metadata %s: %v", body, err)
	}
	return md.Outputs[0].Name
}

func TestBadRequests(t *testing.T) {
	m := digitsArtifact(t)
	_, url := startServer(t, m, Config{MaxRequestBytes: 4096})
	c := &http.Client{Timeout: 30 * time.Second}
	x := digitsInput(t)
	good := func(mod func(in map[string]any)) string {
		in := map[string]any{"name": "x", "shape": []int{1, 1, 8, 8}, "datatype": "FP32", "data": x}
		mod(in)
		b, _ := json.Marshal(map[string]any{"inputs": []any{in}})
		return string(b)
	}
	infer := "/v2/models/digits/infer"
	for _, tc := range []struct {
		name, path, body string
		want             int
		msg              string
	}{
		{"empty body", infer, "", 400, "empty request body"},
		{"not JSON", infer, "{inputs", 400, "not a valid inference request"},
		{"two objects", infer, good(func(map[string]any) {}) + "{}", 400, "data after the JSON object"},
		{"unknown field", infer, `{"inputz": []}`, 400, `unknown field "inputz"`},
		{"no inputs", infer, `{"inputs": []}`, 400, `no "inputs"`},
		{"wrong input name", infer, good(func(in map[string]any) { in["name"] = "y" }), 400, `no input "y": its inputs are x FP32 [-1 1 8 8]`},
		{"unnamed input", infer, good(func(in map[string]any) { delete(in, "name") }), 400, "input 0 has no name"},
		{"input twice", infer, `{"inputs":[{"name":"x"},{"name":"x"}]}`, 400, "input x is given twice"},
		{"wrong datatype", infer, good(func(in map[string]any) { in["datatype"] = "INT64" }), 400, `datatype "INT64", the model takes FP32`},
		{"wrong rank", infer, good(func(in map[string]any) { in["shape"] = []int{1, 64} }), 400, "has 2 dimensions, the model takes 4"},
		{"wrong dimension", infer, good(func(in map[string]any) { in["shape"] = []int{1, 1, 8, 9} }), 400, "dimension 3 is 9, the model takes 8"},
		{"zero batch", infer, good(func(in map[string]any) { in["shape"] = []int{0, 1, 8, 8}; in["data"] = []float32{} }), 400, "batch dimension 0 is 0"},
		{"too few values", infer, good(func(in map[string]any) { in["data"] = x[:2] }), 400, "data has 2 elements, shape [1 1 8 8] holds 64"},
		{"strings as data", infer, good(func(in map[string]any) { in["data"] = []string{"a"} }), 400, "data is not a list of numbers"},
		{"ragged nesting", infer, good(func(in map[string]any) { in["data"] = []any{[]float32{1}, 2} }), 400, "mixes lists and values"},
		{"no data", infer, good(func(in map[string]any) { delete(in, "data") }), 400, `no "data"`},
		{"unknown datatype", infer, good(func(in map[string]any) { in["datatype"] = "FLOAT" }), 400, `datatype "FLOAT", the model takes FP32`},
		{"binary data", infer, good(func(in map[string]any) { in["parameters"] = map[string]any{"binary_data_size": 256} }), 400, "has binary_data_size but the request has no Inference-Header-Content-Length header"},
		{"unknown output", infer, `{"inputs":[{"name":"x","shape":[1,1,8,8],"datatype":"FP32","data":[` + strings.Repeat("0,", 63) + `0]}],"outputs":[{"name":"logits"}]}`, 400, `no output "logits"`},
		{"too large", infer, `{"inputs":[` + strings.Repeat(" ", 5000) + `]}`, 413, "over the server's limit of 4096"},
		{"unknown model", "/v2/models/mnist/infer", good(func(map[string]any) {}), 404, `unknown model "mnist": this server serves "digits"`},
		{"unknown version", "/v2/models/digits/versions/2/infer", good(func(map[string]any) {}), 404, `no version "2"`},
		{"GET on infer", infer, "", 405, "inference takes POST"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			method := "POST"
			if tc.want == 405 {
				method = "GET"
			}
			code, body := do(t, c, method, url+tc.path, []byte(tc.body))
			if code != tc.want {
				t.Fatalf("got %d %s, want %d", code, body, tc.want)
			}
			if tc.msg == "" {
				return
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("answer %s (%v): want a JSON error containing %q", body, err, tc.msg)
			}
		})
	}
	// A body without Content-Length, over the limit as it streams.
	req, _ := http.NewRequest("POST", url+infer, io.MultiReader(strings.NewReader(`{"inputs":[`), strings.NewReader(strings.Repeat(" ", 8000))))
	req.ContentLength = -1
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked body over the limit: %d, want 413", resp.StatusCode)
	}
}

// With the one instance busy and the queue full, a request is answered 429 at once.
func TestQueueFull(t *testing.T) {
	m := digitsArtifact(t)
	s, url := startServer(t, m, Config{MaxQueue: 1})
	sess := <-s.free // the instance is busy
	c := &http.Client{Timeout: 30 * time.Second}
	body := inferBody(digitsInput(t), []int64{1, 1, 8, 8})
	first := make(chan int, 1)
	go func() {
		code, _, _ := try(c, "POST", url+"/v2/models/digits/infer", body)
		first <- code
	}()
	for deadline := time.Now().Add(10 * time.Second); s.waiting.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never queued")
		}
	}
	code, b := do(t, c, "POST", url+"/v2/models/digits/infer", body)
	if code != 429 || !strings.Contains(string(b), "queue full (1 waiting, --max-queue)") {
		t.Errorf("with the queue full: %d %s, want 429 naming the queue", code, b)
	}
	s.free <- sess
	if code := <-first; code != 200 {
		t.Errorf("the queued request: %d, want 200", code)
	}
	if code, b := do(t, c, "POST", url+"/v2/models/digits/infer", body); code != 200 {
		t.Errorf("after the queue emptied: %d %s", code, b)
	}
}

// Eight keep-alive clients for about 3 s: every answer arrives and is the library's.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	m := digitsArtifact(t)
	_, url := startServer(t, m, Config{Instances: 2, MaxQueue: 64})
	x := digitsInput(t)
	want := predictDirect(t, m, x, []int64{1, 1, 8, 8})
	body := inferBody(x, []int64{1, 1, 8, 8})
	const clients, maxPerClient = 8, 20000
	stop := time.Now().Add(3 * time.Second)
	var mu sync.Mutex
	var lat []time.Duration
	var bad []string
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			var mine []time.Duration
			for n := 0; n < maxPerClient && time.Now().Before(stop); n++ {
				t0 := time.Now()
				resp, err := c.Post(url+"/v2/models/digits/infer", "application/json", bytes.NewReader(body))
				if err != nil {
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(t0))
				var r InferResponse
				var got []float32
				if resp.StatusCode == 200 && json.Unmarshal(b, &r) == nil && len(r.Outputs) == 1 {
					raw, _ := json.Marshal(r.Outputs[0].Data)
					_ = json.Unmarshal(raw, &got)
				}
				if !slices.Equal(got, want) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%d %s", resp.StatusCode, b))
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
	slices.Sort(lat)
	if len(lat) < clients {
		t.Fatalf("only %d answers", len(lat))
	}
	t.Logf("%d requests from %d clients in ~3 s: p50 %v, p99 %v, max %v", len(lat), clients,
		lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
}

// Shutdown answers every admitted request, refuses later ones with 503, and turns readiness off.
func TestShutdownDrains(t *testing.T) {
	m := digitsArtifact(t)
	s, url := startServer(t, m, Config{Instances: 1, MaxQueue: 64})
	body := inferBody(digitsInput(t), []int64{1, 1, 8, 8})
	codes := make(chan int, 64)
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 4; n++ {
				resp, err := c.Post(url+"/v2/models/digits/infer", "application/json", bytes.NewReader(body))
				if err != nil {
					codes <- -1
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for code := range codes {
		count[code]++
	}
	if count[-1] > 0 || count[200]+count[503] != 64 {
		t.Errorf("answers by status: %v: want only 200 and 503", count)
	}
	t.Logf("answers by status during the drain: %v", count)
	code, _ := do(t, c, "GET", url+"/v2/health/ready", nil)
	if code != 503 {
		t.Errorf("ready after shutdown: %d, want 503", code)
	}
}

// The binary tensor data extension, both ways, as Triton's clients send it.
func TestBinaryTensorData(t *testing.T) {
	m := digitsArtifact(t)
	_, url := startServer(t, m, Config{})
	c := &http.Client{Timeout: 30 * time.Second}
	x := digitsInput(t)
	want := predictDirect(t, m, x, []int64{1, 1, 8, 8})
	xb := appendBinary(nil, x)
	post := func(head string, tail []byte, hdr string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v2/models/digits/infer", bytes.NewReader(append([]byte(head), tail...)))
		if hdr == "" {
			hdr = fmt.Sprint(len(head))
		}
		req.Header.Set("Inference-Header-Content-Length", hdr)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	in := func(size int) string {
		return fmt.Sprintf(`{"name":"x","shape":[1,1,8,8],"datatype":"FP32","parameters":{"binary_data_size":%d}}`, size)
	}
	// Binary in, binary out.
	code, h, b := post(`{"inputs":[`+in(256)+`],"parameters":{"binary_data_output":true}}`, xb, "")
	if code != 200 {
		t.Fatalf("binary in and out: %d %s", code, b)
	}
	var n int
	if _, err := fmt.Sscan(h.Get("Inference-Header-Content-Length"), &n); err != nil || n > len(b) {
		t.Fatalf("answer header length %q for %d bytes", h.Get("Inference-Header-Content-Length"), len(b))
	}
	var resp InferResponse
	if err := json.Unmarshal(b[:n], &resp); err != nil || len(resp.Outputs) != 1 {
		t.Fatalf("answer JSON %s: %v", b[:n], err)
	}
	if size, _ := resp.Outputs[0].Parameters["binary_data_size"].(float64); int(size) != 40 || resp.Outputs[0].Data != nil || len(b)-n != 40 {
		t.Fatalf("answer %s with %d bytes after it: want binary_data_size 40 and no data", b[:n], len(b)-n)
	}
	got, err := fromBinary(torch.Float32, b[n:], 10)
	if err != nil || !slices.Equal(got.([]float32), want) {
		t.Errorf("binary answer %v (%v), want %v", got, err, want)
	}
	// Binary in, JSON out (binary_data false on the output wins over the request's default).
	outName := md0(t, url, c)
	code, _, b = post(`{"inputs":[`+in(256)+`],"parameters":{"binary_data_output":true},"outputs":[{"name":"`+outName+`","parameters":{"binary_data":false}}]}`, xb, "")
	var jr struct {
		Outputs []struct {
			Data []float32 `json:"data"`
		} `json:"outputs"`
	}
	if code != 200 || json.Unmarshal(b, &jr) != nil || len(jr.Outputs) != 1 || !slices.Equal(jr.Outputs[0].Data, want) {
		t.Errorf("binary in, JSON out: %d %s, want %v", code, b, want)
	}
	for _, tc := range []struct {
		name, head string
		tail       []byte
		hdr, msg   string
	}{
		{"size short of the shape", `{"inputs":[` + in(252) + `]}`, xb[:252], "", "binary_data_size is 252 bytes, shape and datatype need 256"},
		{"size past the body", `{"inputs":[` + in(512) + `]}`, xb, "", "runs past the body"},
		{"bytes left over", `{"inputs":[` + in(256) + `]}`, append(slices.Clone(xb), 0, 0), "", "258 bytes follow the JSON"},
		{"header past the body", `{"inputs":[` + in(256) + `]}`, xb, "99999", "header Inference-Header-Content-Length"},
		{"header not a number", `{"inputs":[` + in(256) + `]}`, xb, "ten", "header Inference-Header-Content-Length"},
		{"data and binary", `{"inputs":[{"name":"x","shape":[1,1,8,8],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":256}}]}`, xb, "", "and binary_data_size: send the elements one way"},
		{"negative size", `{"inputs":[` + in(-1) + `]}`, nil, "", "binary_data_size -1"},
		{"binary_data not a bool", `{"inputs":[` + in(256) + `],"parameters":{"binary_data_output":"yes"}}`, xb, "", "parameter binary_data_output is"},
	} {
		code, _, b := post(tc.head, tc.tail, tc.hdr)
		if code != 400 || !strings.Contains(string(b), tc.msg) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, code, b, tc.msg)
		}
	}
}

// Requests that arrive together run as one batch, and each gets its own rows: the library's
// answer for its input alone, up to float rounding of the batched kernels.
func TestDynamicBatching(t *testing.T) {
	m := digitsArtifact(t)
	s, url := startServer(t, m, Config{Instances: 1, MaxBatch: 4, BatchDelay: 5 * time.Millisecond})
	x := digitsInput(t)
	c := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 8; i++ {
		n := int64(1 + i%2) // batches of 1 and 2 samples, mixed
		in := make([]float32, 0, 64*n)
		for k := int64(0); k < n; k++ {
			for _, v := range x {
				in = append(in, v*float32(i+1)/8+float32(k))
			}
		}
		shape := []int64{n, 1, 8, 8}
		want := predictDirect(t, m, in, shape)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				code, b, _ := try(c, "POST", url+"/v2/models/digits/infer", inferBody(in, shape))
				var resp struct {
					Outputs []struct {
						Shape []int64   `json:"shape"`
						Data  []float32 `json:"data"`
					} `json:"outputs"`
				}
				if code != 200 || json.Unmarshal(b, &resp) != nil || len(resp.Outputs) != 1 || !slices.Equal(resp.Outputs[0].Shape, []int64{n, 10}) || !close32(resp.Outputs[0].Data, want) {
					errs <- fmt.Sprintf("client %d: %d %s, want [%d 10] %v", i, code, b, n, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	s.metrics.mu.Lock()
	batches, batched := s.metrics.batches, s.metrics.batched
	s.metrics.mu.Unlock()
	t.Logf("80 requests ran in %d batches", batches)
	if batched != 80 || batches >= 80 {
		t.Errorf("%d requests in %d batches: want 80 requests in fewer batches", batched, batches)
	}
	// Without a manifest there is no batch dimension to join on.
	plain, err := torchspeed.Load(fixtures.Load(t).Get(t, "digits").ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := New(plain, Config{Name: "plain", MaxBatch: 4}); err == nil || !strings.Contains(err.Error(), "dynamic batching needs every input batched along dimension 0") {
		t.Errorf("batching a model without a manifest: %v", err)
	}
}

func close32(got, want []float32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		d := float64(got[i] - want[i])
		if d < 0 {
			d = -d
		}
		w := float64(want[i])
		if w < 0 {
			w = -w
		}
		if d > 1e-4*(1+w) {
			return false
		}
	}
	return true
}

// A client that gives up while its request waits frees its place in the queue, and the request
// never runs.
func TestClientGoneLeavesQueue(t *testing.T) {
	m := digitsArtifact(t)
	s, url := startServer(t, m, Config{MaxQueue: 1})
	sess := <-s.free
	defer func() { s.free <- sess }()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v2/models/digits/infer", bytes.NewReader(inferBody(digitsInput(t), []int64{1, 1, 8, 8})))
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); s.waiting.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never queued")
		}
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a canceled request was answered")
	}
	for deadline := time.Now().Add(10 * time.Second); s.waiting.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the canceled request kept its place in the queue")
		}
	}
	var b bytes.Buffer
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(b.String(), `code="499"} 1`); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no 499 recorded:\n%s", b.String())
		}
		b.Reset()
		s.metrics.write(&b)
	}
}
