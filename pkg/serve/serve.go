// Package serve is an inference server over torchspeed's library that speaks the Open Inference
// Protocol (KServe v2) over HTTP/REST, the protocol of Triton and KServe runtimes, so that their
// clients and load generators work unchanged. Each model instance is a torchspeed Session: at
// one intra-op thread a request runs it on the request's own goroutine, at more on a locked OS
// thread of the instance's own (its own OpenMP pool, at the artifact's measured thread count);
// requests wait in one bounded queue for the next free instance.
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// Defaults for Config's zero values.
const (
	DefaultMaxQueue        = 64
	DefaultMaxRequestBytes = 64 << 20
	// Platform is the platform name the model metadata gives, as Triton names TorchScript.
	Platform = "pytorch_torchscript"
	// ModelVersion is the one version a server has of its model.
	ModelVersion = "1"
)

// Config sets up a Server.
type Config struct {
	// Name is the model's name in URLs (/v2/models/{name}); required.
	Name string
	// Instances is how many sessions run requests side by side (0: 1); at more than one
	// intra-op thread each on its own OS thread.
	Instances int
	// MaxQueue bounds the requests waiting for an instance; one more is answered 429
	// (0: DefaultMaxQueue; negative: none wait, a request is taken only by an idle instance).
	MaxQueue int
	// MaxRequestBytes bounds a request body; a larger one is answered 413
	// (0: DefaultMaxRequestBytes).
	MaxRequestBytes int64
	// MaxBatch, above 1, turns on dynamic batching: an instance joins requests that arrive
	// within BatchDelay of the first along the batch dimension, up to MaxBatch samples, runs
	// them as one call and splits the outputs by rows. The model's inputs must all be batched
	// along dimension 0, and its outputs must answer row by row.
	MaxBatch   int
	BatchDelay time.Duration
}

// Validate names the setting that is out of range and what is allowed.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || strings.ContainsAny(c.Name, "/?#% \t\n"):
		return fmt.Errorf("model name %q: give a non-empty name without '/', '?', '#', '%%' or spaces (it is part of the URL)", c.Name)
	case c.Instances < 0 || c.Instances > 256:
		return fmt.Errorf("instances %d: use 1 to 256 (0: 1)", c.Instances)
	case c.MaxRequestBytes < 0:
		return fmt.Errorf("max request bytes %d: use a positive size (0: %d)", c.MaxRequestBytes, DefaultMaxRequestBytes)
	case c.MaxBatch < 0 || c.MaxBatch > 1<<16:
		return fmt.Errorf("max batch %d: use 0 or 1 (no batching) to 65536", c.MaxBatch)
	case c.BatchDelay < 0 || c.BatchDelay > time.Minute:
		return fmt.Errorf("batch delay %v: use 0 to 1m", c.BatchDelay)
	}
	return nil
}

// Server answers Open Inference Protocol requests for one loaded model. Its Handler is safe from
// many goroutines.
type Server struct {
	cfg      Config
	model    *torchspeed.Model
	sessions []*torchspeed.Session
	inputs   []inputSpec
	meta     ModelMetadata
	// free holds the instances not running a request. A handler takes one and calls it itself:
	// a worker goroutine in between cost two more scheduler wake-ups per request.
	free    chan *torchspeed.Session
	waiting atomic.Int64 // requests waiting for an instance
	// batches queues requests for the batching loops (nil without dynamic batching).
	batches chan *batchReq
	loops   sync.WaitGroup
	metrics *metrics
	// draining: Shutdown has begun; new inference requests are answered 503.
	draining atomic.Bool
	// lastRefused is when the last request was refused for the drain (Unix ns).
	lastRefused atomic.Int64
	// pending counts requests between admission and their answer; Shutdown waits for it.
	pending   sync.WaitGroup
	admitMu   sync.RWMutex // admission (read side) against the start of a drain (write side)
	closeOnce sync.Once
	closeErr  error
}

// inputSpec is a tensor input the model takes, from its manifest.
type inputSpec struct {
	name     string
	datatype string
	shape    []int64 // as the manifest measured it
	batchDim int     // -1: none
}

// New starts cfg.Instances sessions of model and runs one call on zeros of the manifest's input
// shapes on each: it learns the outputs the metadata lists, and no client pays for the first
// call's warm-up. At one intra-op thread a request runs its forward on its own goroutine's OS
// thread (a one-thread team keeps no pool there): handing it to an instance's thread and back
// cost more than a small model's forward; the instances still bound how many run at once. At
// more threads each instance has an OS thread (and OpenMP pool) of its own. The Server does not
// own model: close the Server, then the model.
func New(model *torchspeed.Model, cfg Config) (*Server, error) {
	return newServer(model, cfg, torch.NumThreads() == 1)
}

// newServer is New with the choice of thread made: here (true), or a thread per instance.
func newServer(model *torchspeed.Model, cfg Config, here bool) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if model == nil {
		return nil, errors.New("serve: no model: pass the *Model that torchspeed.Load returned")
	}
	if cfg.Instances == 0 {
		cfg.Instances = 1
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxQueue < 0 {
		cfg.MaxQueue = 0
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	s := &Server{cfg: cfg, model: model, metrics: newMetrics(), free: make(chan *torchspeed.Session, cfg.Instances)}
	s.meta = ModelMetadata{Name: cfg.Name, Versions: []string{ModelVersion}, Platform: Platform, Inputs: []TensorMetadata{}, Outputs: []TensorMetadata{}}
	if man := model.Manifest; man != nil {
		for _, in := range man.Inputs {
			if len(in.Value) > 0 {
				continue // a constant the library passes itself
			}
			if in.Type != "" && in.Type != "Tensor" {
				return nil, fmt.Errorf("serve: model %s: input %s is a %s: this server passes tensors only; serve a model whose method takes tensors", cfg.Name, in.Name, in.Type)
			}
			spec := inputSpec{name: in.Name, datatype: protocolType(in.DType), shape: in.Shape, batchDim: 0}
			if in.BatchDim != nil {
				spec.batchDim = *in.BatchDim
			}
			if spec.batchDim >= len(in.Shape) {
				spec.batchDim = -1
			}
			s.inputs = append(s.inputs, spec)
			md := TensorMetadata{Name: spec.name, Datatype: spec.datatype, Shape: slices.Clone(in.Shape)}
			if spec.batchDim >= 0 {
				md.Shape[spec.batchDim] = -1
			}
			s.meta.Inputs = append(s.meta.Inputs, md)
		}
	}
	opts := torchspeed.SessionOptions{OwnThread: !here, OneThreadHere: here}
	for i := 0; i < cfg.Instances; i++ {
		sess, err := model.NewSession(opts)
		if err != nil {
			s.closeSessions()
			return nil, fmt.Errorf("serve: model %s: starting instance %d of %d: %w", cfg.Name, i+1, cfg.Instances, err)
		}
		s.sessions = append(s.sessions, sess)
	}
	for i, sess := range s.sessions {
		outs, err := s.warmUp(sess)
		if err != nil {
			s.closeSessions()
			return nil, fmt.Errorf("serve: model %s: warm-up call on instance %d with zeros of the manifest's input shapes: %w", cfg.Name, i+1, err)
		}
		if i == 0 {
			s.meta.Outputs = outs
		}
	}
	if cfg.MaxBatch > 1 {
		if len(s.inputs) == 0 || slices.ContainsFunc(s.inputs, func(in inputSpec) bool { return in.batchDim != 0 }) {
			s.closeSessions()
			return nil, fmt.Errorf("serve: model %s: dynamic batching needs every input batched along dimension 0 in the manifest (inputs: %s): serve it without --max-batch", cfg.Name, s.inputNames())
		}
		s.batches = make(chan *batchReq, cfg.MaxQueue)
		for _, sess := range s.sessions {
			s.loops.Add(1)
			go s.batchLoop(sess)
		}
		return s, nil
	}
	for _, sess := range s.sessions {
		s.free <- sess
	}
	return s, nil
}

// warmUp runs one call on zeros and describes the outputs it gave; a plain TorchScript file
// without a manifest has no shapes to try, and its outputs stay unlisted.
func (s *Server) warmUp(sess *torchspeed.Session) ([]TensorMetadata, error) {
	if len(s.inputs) == 0 {
		return []TensorMetadata{}, nil
	}
	ins := make([]*torch.Tensor, 0, len(s.inputs))
	defer func() {
		for _, t := range ins {
			t.Close()
		}
	}()
	for _, in := range s.inputs {
		dt, err := dtypeOf(in.datatype)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.name, err)
		}
		n, err := numel(in.shape)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.name, err)
		}
		t, err := zeros(dt, n, in.shape)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.name, err)
		}
		ins = append(ins, t)
	}
	outs, err := sess.Predict(ins...)
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	md := make([]TensorMetadata, 0, len(outs))
	for _, o := range outs {
		r, err := outputOf(o)
		if err != nil {
			return nil, err
		}
		shape := slices.Clone(r.Shape)
		if len(shape) > 0 && len(s.inputs) > 0 && s.inputs[0].batchDim >= 0 {
			shape[0] = -1 // outputs follow the inputs' batch
		}
		md = append(md, TensorMetadata{Name: r.Name, Datatype: r.Datatype, Shape: shape})
	}
	return md, nil
}

func zeros(dt torch.DType, n int64, shape []int64) (*torch.Tensor, error) {
	var data any
	switch dt {
	case torch.Float32:
		data = make([]float32, n)
	case torch.Float64:
		data = make([]float64, n)
	case torch.Int64:
		data = make([]int64, n)
	case torch.Int32:
		data = make([]int32, n)
	case torch.Int16:
		data = make([]int16, n)
	case torch.Int8:
		data = make([]int8, n)
	case torch.Uint8:
		data = make([]uint8, n)
	default:
		data = make([]bool, n)
	}
	return torch.NewTensorAny(data, shape)
}

// predict turns a panic below into an error: one request must never take the server down.
func (s *Server) predict(sess *torchspeed.Session, ins []*torch.Tensor) (outs []torch.Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, fmt.Errorf("inference panicked: %v", r)
		}
	}()
	return sess.Predict(ins...)
}

// Metadata is the model metadata GET /v2/models/{name} answers.
func (s *Server) Metadata() ModelMetadata { return s.meta }

// Shutdown drains the server: new inference requests are answered 503 and readiness turns
// false, requests already admitted are answered, then the instances stop; it returns once no
// request has been refused for 100 ms (at most 2 s more), so that requests clients sent on
// keep-alive connections just before are answered 503 rather than reset. It returns ctx's error
// if requests are still in flight when ctx ends (their instances keep running; Close waits for
// them). Stop the HTTP server (http.Server.Shutdown) after it, so that answers reach clients.
func (s *Server) Shutdown(ctx context.Context) error {
	s.admitMu.Lock()
	s.draining.Store(true)
	s.admitMu.Unlock()
	done := make(chan struct{})
	go func() { s.pending.Wait(); close(done) }()
	select {
	case <-done:
		err := s.Close()
		s.settle(ctx)
		return err
	case <-ctx.Done():
		return fmt.Errorf("serve: drain: %d request(s) still in flight: %w", s.metrics.inflight.Load(), ctx.Err())
	}
}

// settle returns once no inference request has been refused for settleQuiet (at most
// settleMax, or when ctx ends). A client may have sent a request on a keep-alive connection
// just before the drain that the server has not read yet: http.Server.Shutdown, which comes
// next, closes such a connection as idle and the client reads a reset instead of an answer.
// Meanwhile they are read and answered 503 (with Connection: close), and the connections
// close as they answer.
func (s *Server) settle(ctx context.Context) {
	start := time.Now()
	for time.Since(start) < settleMax && ctx.Err() == nil {
		last := time.Unix(0, s.lastRefused.Load())
		if time.Since(last) >= settleQuiet && time.Since(start) >= settleQuiet {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(settleQuiet / 5):
		}
	}
}

// How long settle waits for refusals to stop, and at most.
const (
	settleQuiet = 100 * time.Millisecond
	settleMax   = 2 * time.Second
)

// Close stops the instances after the requests already queued, and frees their sessions. It is
// idempotent; it does not close the model.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.admitMu.Lock()
		s.draining.Store(true)
		s.admitMu.Unlock()
		s.pending.Wait()
		if s.batches != nil {
			close(s.batches)
			s.loops.Wait()
		}
		s.closeErr = s.closeSessions()
	})
	return s.closeErr
}

func (s *Server) closeSessions() error {
	var errs []error
	for _, sess := range s.sessions {
		errs = append(errs, sess.Close())
	}
	return errors.Join(errs...)
}

// errQueueFull is answered 429.
var errQueueFull = errors.New("queue full")

// admit registers a request unless the server is draining.
func (s *Server) admit() bool {
	s.admitMu.RLock()
	defer s.admitMu.RUnlock()
	if s.draining.Load() {
		s.lastRefused.Store(time.Now().UnixNano())
		return false
	}
	s.pending.Add(1)
	return true
}

// run waits for a free instance, unless MaxQueue requests wait already, and runs ins on it. A
// request whose client has gone (ctx done) leaves the queue without running.
func (s *Server) run(ctx context.Context, ins []*torch.Tensor) ([]torch.Output, error) {
	start := time.Now()
	var sess *torchspeed.Session
	select {
	case sess = <-s.free:
	default:
		if s.waiting.Add(1) > int64(s.cfg.MaxQueue) {
			s.waiting.Add(-1)
			return nil, errQueueFull
		}
		s.metrics.queued.Add(1)
		select {
		case sess = <-s.free:
		case <-ctx.Done():
		}
		s.metrics.queued.Add(-1)
		s.waiting.Add(-1)
		if sess == nil {
			return nil, &statusError{statusClientGone, "the client closed the request while it waited for an instance"}
		}
	}
	s.metrics.queueTime(s.cfg.Name, time.Since(start))
	defer func() { s.free <- sess }()
	return s.predict(sess, ins)
}

// statusClientGone is recorded for requests whose client left before the answer (nginx's
// convention); nobody reads the answer.
const statusClientGone = 499

// runValues makes tensors of vals, runs them on the next free instance and reads the outputs.
func (s *Server) runValues(ctx context.Context, vals []tensorData) ([]ResponseOutput, error) {
	ins, err := tensorsOf(vals)
	defer closeAll(ins)
	if err != nil {
		return nil, err
	}
	outs, err := s.run(ctx, ins)
	if err != nil {
		return nil, err
	}
	defer torch.CloseOutputs(outs)
	return readOutputs(outs)
}

func tensorsOf(vals []tensorData) ([]*torch.Tensor, error) {
	ins := make([]*torch.Tensor, 0, len(vals))
	for _, v := range vals {
		t, err := torch.NewTensorAny(v.data, v.shape)
		if err != nil {
			return ins, err
		}
		ins = append(ins, t)
	}
	return ins, nil
}

func closeAll(ts []*torch.Tensor) {
	for _, t := range ts {
		t.Close()
	}
}

func readOutputs(outs []torch.Output) ([]ResponseOutput, error) {
	ros := make([]ResponseOutput, 0, len(outs))
	for _, o := range outs {
		ro, err := outputOf(o)
		if err != nil {
			return nil, err
		}
		ros = append(ros, ro)
	}
	return ros, nil
}

// batchReq is one request waiting to be batched: its inputs, its batch size.
type batchReq struct {
	vals []tensorData
	n    int64
	enq  time.Time
	done chan batchResult
}

type batchResult struct {
	outs []ResponseOutput
	err  error
}

// runBatched queues vals for the batching loops and waits for its rows of the answer.
func (s *Server) runBatched(vals []tensorData) ([]ResponseOutput, error) {
	r := &batchReq{vals: vals, n: vals[0].shape[0], enq: time.Now(), done: make(chan batchResult, 1)}
	s.metrics.queued.Add(1)
	select {
	case s.batches <- r:
	default:
		s.metrics.queued.Add(-1)
		return nil, errQueueFull
	}
	res := <-r.done
	return res.outs, res.err
}

// batchLoop gathers requests for one instance: the first waiting, then whatever arrives within
// BatchDelay, up to MaxBatch samples; a request that would overflow the batch starts the next.
func (s *Server) batchLoop(sess *torchspeed.Session) {
	defer s.loops.Done()
	max := int64(s.cfg.MaxBatch)
	var carry *batchReq
	for {
		first := carry
		carry = nil
		if first == nil {
			var ok bool
			if first, ok = <-s.batches; !ok {
				return
			}
		}
		s.metrics.queued.Add(-1)
		group, total := []*batchReq{first}, first.n
		timer := time.NewTimer(s.cfg.BatchDelay)
	collect:
		for total < max {
			select {
			case r, ok := <-s.batches:
				if !ok {
					break collect
				}
				if total+r.n > max {
					carry = r
					break collect
				}
				s.metrics.queued.Add(-1)
				group, total = append(group, r), total+r.n
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		s.runGroup(sess, group, total) // carry stays counted as queued until the next round takes it
	}
}

// runGroup runs a batch as one call and hands each request its rows.
func (s *Server) runGroup(sess *torchspeed.Session, group []*batchReq, total int64) {
	start := time.Now()
	for _, r := range group {
		s.metrics.queueTime(s.cfg.Name, start.Sub(r.enq))
	}
	s.metrics.batch(len(group))
	fail := func(err error) {
		for _, r := range group {
			r.done <- batchResult{err: err}
		}
	}
	vals := group[0].vals
	if len(group) > 1 {
		vals = make([]tensorData, len(group[0].vals))
		for i := range vals {
			parts := make([]any, len(group))
			for j, r := range group {
				parts[j] = r.vals[i].data
			}
			shape := slices.Clone(group[0].vals[i].shape)
			shape[0] = total
			vals[i] = tensorData{concatData(parts), shape}
		}
	}
	ins, err := tensorsOf(vals)
	defer closeAll(ins)
	if err != nil {
		fail(err)
		return
	}
	outs, err := s.predict(sess, ins)
	if err != nil {
		fail(err)
		return
	}
	defer torch.CloseOutputs(outs)
	ros, err := readOutputs(outs)
	if err != nil {
		fail(err)
		return
	}
	if len(group) == 1 {
		group[0].done <- batchResult{outs: ros}
		return
	}
	for _, o := range ros {
		if len(o.Shape) == 0 || o.Shape[0] != total {
			fail(fmt.Errorf("output %s has shape %v for a batch of %d requests (%d samples): it does not answer row by row; serve this model without --max-batch", o.Name, o.Shape, len(group), total))
			return
		}
	}
	off := int64(0)
	for _, r := range group {
		mine := make([]ResponseOutput, len(ros))
		for k, o := range ros {
			row := int64(dataLen(o.Data)) / total
			shape := slices.Clone(o.Shape)
			shape[0] = r.n
			mine[k] = ResponseOutput{Name: o.Name, Shape: shape, Datatype: o.Datatype, Data: sliceData(o.Data, int(off*row), int((off+r.n)*row))}
		}
		off += r.n
		r.done <- batchResult{outs: mine}
	}
}

// ServerMetadata is what GET /v2 answers.
func (s *Server) ServerMetadata() ServerMetadata {
	return ServerMetadata{Name: "torchspeed", Version: version.Version, Extensions: []string{"binary_tensor_data"}}
}

// writeJSON writes v with status code; an error writing means the client has gone.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]string{"error": fmt.Sprintf("encoding the answer: %v", clip(err.Error()))})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// httpError answers {"error": "..."}, the protocol's error body.
func httpError(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, a...)})
}
