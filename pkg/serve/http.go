package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// Handler serves the protocol's REST endpoints and GET /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	mux.HandleFunc("GET /v2/health/ready", s.ready)
	mux.HandleFunc("GET /v2", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.ServerMetadata()) })
	mux.HandleFunc("GET /v2/models/{name}", s.forModel(s.metadata))
	mux.HandleFunc("GET /v2/models/{name}/versions/{version}", s.forModel(s.metadata))
	mux.HandleFunc("GET /v2/models/{name}/ready", s.forModel(s.ready))
	mux.HandleFunc("GET /v2/models/{name}/versions/{version}/ready", s.forModel(s.ready))
	// Any method, so that a GET is told to POST in JSON rather than by the mux's plain text.
	mux.HandleFunc("/v2/models/{name}/infer", s.forModel(s.infer))
	mux.HandleFunc("/v2/models/{name}/versions/{version}/infer", s.forModel(s.infer))
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = s.metrics.write(w)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, "no endpoint %s %s: the server answers GET /v2/health/live, /v2/health/ready, /v2/models/%s[/ready], /metrics and POST /v2/models/%s/infer",
			r.Method, clip(r.URL.Path), s.cfg.Name, s.cfg.Name)
	})
	return mux
}

// unknownModel labels requests for models this server does not serve.
const unknownModel = "(unknown)"

// forModel checks the model name and version in the path before h runs.
func (s *Server) forModel(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if name := r.PathValue("name"); name != s.cfg.Name {
			code := http.StatusNotFound
			if strings.HasSuffix(r.URL.Path, "/infer") {
				// One label for every unknown name: a client must not grow the series without bound.
				s.metrics.request(unknownModel, code, 0)
			}
			httpError(w, code, "unknown model %q: this server serves %q", clip(name), s.cfg.Name)
			return
		}
		if v := r.PathValue("version"); v != "" && v != ModelVersion {
			httpError(w, http.StatusNotFound, "model %s has no version %q: it has version %s", s.cfg.Name, clip(v), ModelVersion)
			return
		}
		h(w, r)
	}
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "error": "draining: the server is shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
}

func (s *Server) metadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.meta)
}

// statusError is an answer other than 200, with the message the client reads.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func badRequest(format string, a ...any) *statusError {
	return &statusError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

func (s *Server) infer(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpError(w, http.StatusMethodNotAllowed, "%s %s: inference takes POST with a JSON body", r.Method, clip(r.URL.Path))
		return
	}
	start := time.Now()
	s.metrics.inflight.Add(1)
	defer s.metrics.inflight.Add(-1)
	code := http.StatusOK
	defer func() { s.metrics.request(s.cfg.Name, code, time.Since(start)) }()
	if !s.admit() {
		code = http.StatusServiceUnavailable
		w.Header().Set("Connection", "close")
		httpError(w, code, "model %s is shutting down: send the request to another replica", s.cfg.Name)
		return
	}
	defer s.pending.Done()
	resp, tail, err := s.inferBody(w, r)
	if err != nil {
		var se *statusError
		if !errors.As(err, &se) {
			se = &statusError{http.StatusInternalServerError, err.Error()}
		}
		code = se.code
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		httpError(w, code, "%s", se.msg)
		return
	}
	if tail == nil {
		writeJSON(w, code, resp)
		return
	}
	// The binary tensor data extension: the JSON header, then the outputs' bytes.
	head, err := json.Marshal(resp)
	if err != nil {
		code = http.StatusInternalServerError
		httpError(w, code, "encoding the answer: %v", clip(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(headerLength, strconv.Itoa(len(head)))
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(tail)))
	w.WriteHeader(code)
	_, _ = w.Write(head)
	_, _ = w.Write(tail)
}

// headerLength is the binary tensor data extension's header: the length of the JSON that
// starts the body; tensor bytes follow it.
const headerLength = "Inference-Header-Content-Length"

// inferBody reads, checks and runs one request; tail, non-nil when outputs go as binary data,
// follows the JSON answer. Every error it returns is a *statusError but the model's own failures.
func (s *Server) inferBody(w http.ResponseWriter, r *http.Request) (resp *InferResponse, tail []byte, err error) {
	limit := s.cfg.MaxRequestBytes
	if r.ContentLength > limit {
		return nil, nil, &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is over the server's limit of %d (--max-request-bytes): send smaller batches", r.ContentLength, limit)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over the server's limit of %d bytes (--max-request-bytes): send smaller batches", limit)}
		}
		return nil, nil, badRequest("reading the request body: %v", clip(err.Error()))
	}
	var bin []byte // nil: no binary data follows the JSON
	if h := r.Header.Get(headerLength); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < 0 || n > int64(len(body)) {
			return nil, nil, badRequest("header %s: %q: give the length in bytes of the JSON that starts the body (0 to %d)", headerLength, clip(h), len(body))
		}
		body, bin = body[:n], body[n:]
	}
	var req InferRequest
	if err := decodeRequest(body, &req); err != nil {
		return nil, nil, err
	}
	vals, err := s.inputValues(req.Inputs, bin)
	if err != nil {
		return nil, nil, err
	}
	wanted, binaryOut, err := s.wantedOutputs(req)
	if err != nil {
		return nil, nil, err
	}
	var outs []ResponseOutput
	if s.batches != nil {
		outs, err = s.runBatched(vals)
	} else {
		outs, err = s.runValues(r.Context(), vals)
	}
	if errors.Is(err, errQueueFull) {
		return nil, nil, &statusError{http.StatusTooManyRequests, fmt.Sprintf("model %s: queue full (%d waiting, --max-queue): retry later or add instances", s.cfg.Name, s.cfg.MaxQueue)}
	}
	var se *statusError
	if errors.As(err, &se) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("model %s: inference failed: %v", s.cfg.Name, clip(err.Error()))
	}
	resp = &InferResponse{ModelName: s.cfg.Name, ModelVersion: ModelVersion, ID: req.ID, Outputs: make([]ResponseOutput, 0, len(outs))}
	for _, ro := range outs {
		if wanted != nil && !wanted[ro.Name] {
			continue
		}
		if binaryOut(ro.Name) {
			before := len(tail)
			tail = appendBinary(tail, ro.Data)
			if tail == nil {
				tail = []byte{}
			}
			ro.Parameters = map[string]any{"binary_data_size": len(tail) - before}
			ro.Data = nil
		} else {
			ro.Data = jsonData(ro.Data)
		}
		resp.Outputs = append(resp.Outputs, ro)
	}
	return resp, tail, nil
}

// decodeRequest parses the body strictly: a misspelt field is the client's bug, and a silently
// ignored one hides it.
func decodeRequest(body []byte, req *InferRequest) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest(`empty request body: send {"inputs": [{"name": ..., "shape": [...], "datatype": "FP32", "data": [...]}]}`)
	}
	noInputs := badRequest(`request has no "inputs": give each input's name, shape, datatype and data`)
	if fastRequest(body, req) {
		if len(req.Inputs) == 0 {
			return noInputs
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return badRequest("request body is not a valid inference request: %s: send {\"inputs\": [{\"name\": ..., \"shape\": [...], \"datatype\": \"FP32\", \"data\": [...]}]}", clip(err.Error()))
	}
	if dec.More() {
		return badRequest("request body has data after the JSON object: send one object")
	}
	if len(req.Inputs) == 0 {
		return noInputs
	}
	return nil
}

// inputValues matches the request's inputs to the model's by name and decodes them, in the
// model's order.
func (s *Server) inputValues(reqs []RequestInput, bin []byte) ([]tensorData, error) {
	seen := map[string]bool{}
	binOf := map[string][]byte{} // inputs sent as binary data: their bytes, in request order
	off := int64(0)
	for i, in := range reqs {
		if in.Name == "" {
			return nil, badRequest("input %d has no name: name it as the model metadata does (%s)", i, s.inputNames())
		}
		if seen[in.Name] {
			return nil, badRequest("input %s is given twice: give each input once", clip(in.Name))
		}
		seen[in.Name] = true
		raw, ok := in.Parameters["binary_data_size"]
		if !ok {
			continue
		}
		var size int64
		if err := json.Unmarshal(raw, &size); err != nil || size < 0 {
			return nil, badRequest("input %s: binary_data_size %s: give the byte count of its binary data", clip(in.Name), clip(string(raw)))
		}
		if bin == nil {
			return nil, badRequest("input %s has binary_data_size but the request has no %s header: send the JSON's length in it, the tensors' bytes after the JSON", clip(in.Name), headerLength)
		}
		if size > int64(len(bin))-off {
			return nil, badRequest("input %s: binary_data_size %d runs past the body: %d bytes follow the JSON, %d of them for the inputs before it", clip(in.Name), size, len(bin), off)
		}
		binOf[in.Name] = bin[off : off+size]
		off += size
	}
	if bin != nil && off != int64(len(bin)) {
		return nil, badRequest("%d bytes follow the JSON, the inputs' binary_data_size add up to %d: send each input's bytes once, in input order", len(bin), off)
	}
	ins := make([]wireInput, len(reqs))
	for i, in := range reqs {
		ins[i] = wireInput{name: in.Name, datatype: in.Datatype, shape: in.Shape, decode: func(dt torch.DType, n int64) (any, error) {
			return decodeJSON(in, binOf[in.Name], dt, n)
		}}
	}
	return s.matchInputs(ins)
}

// wireInput is an input as a request gives it, with a way to read its elements; the REST and
// gRPC front ends build them, and one check (matchInputs) holds them against the model's.
type wireInput struct {
	name, datatype string
	shape          []int64
	// decode reads n elements of dt, the datatype and shape being checked already.
	decode func(dt torch.DType, n int64) (any, error)
}

// matchInputs matches a request's inputs to the model's by name, checks each one's datatype and
// shape, and decodes them in the model's order.
func (s *Server) matchInputs(ins []wireInput) ([]tensorData, error) {
	decode := func(in wireInput) (tensorData, error) {
		dt, err := dtypeOf(in.datatype)
		if err != nil {
			return tensorData{}, badRequest("input %s: %v", clip(in.name), err)
		}
		n, err := numel(in.shape)
		if err != nil {
			return tensorData{}, badRequest("input %s: %v", clip(in.name), err)
		}
		d, err := in.decode(dt, n)
		if err != nil {
			return tensorData{}, badRequest("input %s: %v", clip(in.name), err)
		}
		return tensorData{d, in.shape}, nil
	}
	if len(s.inputs) == 0 {
		// A plain TorchScript file: no names to check, the inputs go in the order given.
		var vals []tensorData
		for _, in := range ins {
			v, err := decode(in)
			if err != nil {
				return nil, err
			}
			vals = append(vals, v)
		}
		return vals, nil
	}
	byName := make(map[string]wireInput, len(ins))
	for i, in := range ins {
		if in.name == "" {
			return nil, badRequest("input %d has no name: name it as the model metadata does (%s)", i, s.inputNames())
		}
		if _, ok := byName[in.name]; ok {
			return nil, badRequest("input %s is given twice: give each input once", clip(in.name))
		}
		if !slices.ContainsFunc(s.inputs, func(sp inputSpec) bool { return sp.name == in.name }) {
			return nil, badRequest("model %s has no input %q: its inputs are %s", s.cfg.Name, clip(in.name), s.inputNames())
		}
		byName[in.name] = in
	}
	vals := make([]tensorData, 0, len(s.inputs))
	for _, sp := range s.inputs {
		in, ok := byName[sp.name]
		if !ok {
			return nil, badRequest("input %s is missing: model %s takes %s", sp.name, s.cfg.Name, s.inputNames())
		}
		if in.datatype != sp.datatype {
			return nil, badRequest("input %s: datatype %q, the model takes %s", sp.name, clip(in.datatype), sp.datatype)
		}
		if err := sp.checkShape(in.shape); err != nil {
			return nil, badRequest("input %s: %v", sp.name, err)
		}
		v, err := decode(in)
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// checkShape allows any size of the batch dimension, 1 or more, and requires the others to be
// the manifest's.
func (sp inputSpec) checkShape(shape []int64) error {
	if len(shape) != len(sp.shape) {
		return fmt.Errorf("shape %v has %d dimensions, the model takes %d (%s)", shape, len(shape), len(sp.shape), sp.describe())
	}
	for i, d := range shape {
		if i == sp.batchDim {
			if d < 1 {
				return fmt.Errorf("shape %v: batch dimension %d is %d: send 1 or more", shape, i, d)
			}
			continue
		}
		if d != sp.shape[i] {
			return fmt.Errorf("shape %v: dimension %d is %d, the model takes %d (%s)", shape, i, d, sp.shape[i], sp.describe())
		}
	}
	return nil
}

func (sp inputSpec) describe() string {
	shape := slices.Clone(sp.shape)
	if sp.batchDim >= 0 {
		shape[sp.batchDim] = -1
	}
	return fmt.Sprintf("%s %v, -1 any size", sp.datatype, shape)
}

func (s *Server) inputNames() string {
	if len(s.inputs) == 0 {
		return "(not listed: the model has no manifest)"
	}
	names := make([]string, len(s.inputs))
	for i, in := range s.inputs {
		names[i] = in.describeNamed()
	}
	return strings.Join(names, ", ")
}

func (sp inputSpec) describeNamed() string { return sp.name + " " + sp.describe() }

// wantedOutputs is the set of outputs the request names (nil: all), and which of them go back as
// binary data: those whose binary_data is true, or all but those whose binary_data is false
// when the request's binary_data_output is true.
func (s *Server) wantedOutputs(req InferRequest) (map[string]bool, func(string) bool, error) {
	all, err := boolParam(req.Parameters, "binary_data_output", "the request")
	if err != nil {
		return nil, nil, err
	}
	per := map[string]bool{}
	var wanted map[string]bool
	for _, o := range req.Outputs {
		if len(s.meta.Outputs) > 0 && !slices.ContainsFunc(s.meta.Outputs, func(m TensorMetadata) bool { return m.Name == o.Name }) {
			names := make([]string, len(s.meta.Outputs))
			for i, m := range s.meta.Outputs {
				names[i] = m.Name
			}
			return nil, nil, badRequest("model %s has no output %q: its outputs are %s", s.cfg.Name, clip(o.Name), strings.Join(names, ", "))
		}
		if wanted == nil {
			wanted = map[string]bool{}
		}
		wanted[o.Name] = true
		if _, ok := o.Parameters["binary_data"]; ok {
			b, err := boolParam(o.Parameters, "binary_data", "output "+clip(o.Name))
			if err != nil {
				return nil, nil, err
			}
			per[o.Name] = b
		}
	}
	return wanted, func(name string) bool {
		if b, ok := per[name]; ok {
			return b
		}
		return all
	}, nil
}

// boolParam reads an optional boolean parameter.
func boolParam(params map[string]json.RawMessage, key, of string) (bool, error) {
	raw, ok := params[key]
	if !ok {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, badRequest("%s: parameter %s is %s: give true or false", of, key, clip(string(raw)))
	}
	return b, nil
}
