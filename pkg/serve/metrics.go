package serve

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The Prometheus text exposition is written by hand: five series do not justify the client
// library and its dependency tree in every binary that embeds torchspeed.

// latencyBuckets are upper bounds in seconds, from tens of microseconds (small models at one
// thread) to seconds (large models under load).
var latencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

type histogram struct {
	counts []uint64 // one per bucket, then +Inf
	sum    float64
	count  uint64
}

func newHistogram() *histogram { return &histogram{counts: make([]uint64, len(latencyBuckets)+1)} }

func (h *histogram) observe(seconds float64) {
	i, _ := slices.BinarySearch(latencyBuckets, seconds)
	h.counts[i]++
	h.sum += seconds
	h.count++
}

type metrics struct {
	mu       sync.Mutex
	requests map[requestKey]uint64
	latency  map[string]*histogram // by model
	queue    map[string]*histogram // by model
	inflight atomic.Int64
	queued   atomic.Int64
	// batches run and the requests in them (dynamic batching only)
	batches, batched uint64
}

type requestKey struct {
	model string
	code  int
}

func newMetrics() *metrics {
	return &metrics{requests: map[requestKey]uint64{}, latency: map[string]*histogram{}, queue: map[string]*histogram{}}
}

// request records one finished inference request.
func (m *metrics) request(model string, code int, latency time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{model, code}]++
	h := m.latency[model]
	if h == nil {
		h = newHistogram()
		m.latency[model] = h
	}
	h.observe(latency.Seconds())
}

// queueTime records how long a request waited for an instance.
func (m *metrics) queueTime(model string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.queue[model]
	if h == nil {
		h = newHistogram()
		m.queue[model] = h
	}
	h.observe(d.Seconds())
}

// batch records one dynamic batch of n requests.
func (m *metrics) batch(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches++
	m.batched += uint64(n)
}

// write writes every series in the Prometheus text format (version 0.0.4).
func (m *metrics) write(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p("# HELP torchspeed_inference_requests_total Inference requests answered, by model and HTTP status.\n")
	p("# TYPE torchspeed_inference_requests_total counter\n")
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		if a.model != b.model {
			if a.model < b.model {
				return -1
			}
			return 1
		}
		return a.code - b.code
	})
	for _, k := range keys {
		p("torchspeed_inference_requests_total{model=%s,code=\"%d\"} %d\n", quote(k.model), k.code, m.requests[k])
	}
	writeHist := func(name, help string, hs map[string]*histogram) {
		p("# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		models := make([]string, 0, len(hs))
		for model := range hs {
			models = append(models, model)
		}
		slices.Sort(models)
		for _, model := range models {
			h := hs[model]
			var cum uint64
			for i, le := range latencyBuckets {
				cum += h.counts[i]
				p("%s_bucket{model=%s,le=\"%s\"} %d\n", name, quote(model), strconv.FormatFloat(le, 'g', -1, 64), cum)
			}
			p("%s_bucket{model=%s,le=\"+Inf\"} %d\n", name, quote(model), h.count)
			p("%s_sum{model=%s} %s\n", name, quote(model), strconv.FormatFloat(h.sum, 'g', -1, 64))
			p("%s_count{model=%s} %d\n", name, quote(model), h.count)
		}
	}
	writeHist("torchspeed_inference_duration_seconds", "Time from an inference request's arrival to its answer.", m.latency)
	writeHist("torchspeed_queue_duration_seconds", "Time an inference request waited for a model instance.", m.queue)
	p("# HELP torchspeed_inference_in_flight Inference requests being decoded, queued or run.\n# TYPE torchspeed_inference_in_flight gauge\n")
	p("torchspeed_inference_in_flight %d\n", m.inflight.Load())
	p("# HELP torchspeed_queue_depth Inference requests waiting for a model instance.\n# TYPE torchspeed_queue_depth gauge\n")
	p("torchspeed_queue_depth %d\n", m.queued.Load())
	p("# HELP torchspeed_batches_total Dynamic batches run.\n# TYPE torchspeed_batches_total counter\n")
	p("torchspeed_batches_total %d\n", m.batches)
	p("# HELP torchspeed_batched_requests_total Requests run in dynamic batches.\n# TYPE torchspeed_batched_requests_total counter\n")
	p("torchspeed_batched_requests_total %d\n", m.batched)
	return err
}

// quote writes a label value with the escapes the text format requires.
func quote(s string) string { return strconv.Quote(s) }
