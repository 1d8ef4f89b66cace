package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/torchspeed"
)

// DefaultDrainTimeout bounds a graceful shutdown: a request still running after it is cut off,
// so that an orchestrator's SIGTERM always ends the process before its own SIGKILL.
const DefaultDrainTimeout = 25 * time.Second

// Options are what `torchspeed serve` runs with.
type Options struct {
	// Model is the artifact (or plain TorchScript file) to serve.
	Model string
	// Threads overrides the artifact's measured intra-op thread count per instance (0: keep it).
	Threads int
	// Addr is the HTTP listen address (host:port; port 0 picks a free one).
	Addr string
	// GRPCAddr, when set, is the gRPC listen address (host:port; port 0 picks a free one).
	GRPCAddr string
	// DrainTimeout bounds the shutdown (0: DefaultDrainTimeout).
	DrainTimeout time.Duration
	// OpLibraries are custom operator libraries the model calls, loaded before it.
	OpLibraries []string
	Config
}

// CheckAddr refuses a listen address that is not host:port with a port from 0 to 65535.
func CheckAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port (%v): give e.g. 127.0.0.1:8000, or 0.0.0.0:8000 for every interface", err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q: give a number from 0 (any free port) to 65535", port)
	}
	return nil
}

// NameOf is the model name a file is served under by default: its file name without
// .torchspeed.pt or .pt.
func NameOf(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".torchspeed.pt", ".pt"} {
		if s, ok := strings.CutSuffix(base, ext); ok && s != "" {
			return s
		}
	}
	return base
}

// Run loads the model, serves it on opts.Addr until ctx ends, then drains: readiness turns
// false, new requests are refused, requests in flight are answered, and Run returns nil. Lines
// for people (warnings, the addresses, the drain) go to log; the first is "listening on
// http://ADDR", then, with GRPCAddr, "listening on grpc://ADDR".
func Run(ctx context.Context, opts Options, log io.Writer) error {
	if opts.Name == "" {
		opts.Name = NameOf(opts.Model)
	}
	if err := opts.Config.Validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	m, err := torchspeed.Load(opts.Model, torchspeed.LoadOptions{Threads: opts.Threads, OpLibraries: opts.OpLibraries})
	if err != nil {
		return err
	}
	defer m.Close()
	for _, w := range m.Warnings {
		fmt.Fprintln(log, "serve: warning:", w)
	}
	if m.Stateful() {
		// Each instance keeps one copy of the state, and requests from every client run on it.
		fmt.Fprintf(log, "serve: warning: model %q keeps state between calls (%s): requests from all clients share each instance's state; serve it only if that is what it expects\n",
			opts.Model, strings.Join(m.StateAttributes(), ", "))
	}
	s, err := New(m, opts.Config)
	if err != nil {
		return err
	}
	if n, avail := s.cfg.Instances*threadsOf(m, opts.Threads), config.AvailableCPUs(); n > avail {
		fmt.Fprintf(log, "serve: warning: %d instance(s) x %d thread(s) = %d threads on %d CPUs: they will slow each other; lower --instances or --threads\n",
			s.cfg.Instances, threadsOf(m, opts.Threads), n, avail)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w: give a free host:port with --http", opts.Addr, err)
	}
	var gln net.Listener
	if opts.GRPCAddr != "" {
		if gln, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
			ln.Close()
			return fmt.Errorf("serve: listen on %s: %w: give a free host:port with --grpc", opts.GRPCAddr, err)
		}
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(log, "listening on http://%s\n", ln.Addr())
	var gsrv *grpc.Server
	if gln != nil {
		gsrv = s.NewGRPCServer()
		go func() { done <- gsrv.Serve(gln) }()
		fmt.Fprintf(log, "listening on grpc://%s\n", gln.Addr())
	}
	batching := "no dynamic batching"
	if s.batches != nil {
		batching = fmt.Sprintf("batches of up to %d within %v", s.cfg.MaxBatch, s.cfg.BatchDelay)
	}
	fmt.Fprintf(log, "serve: model %s (%d instance(s), %d thread(s) each, queue %d, %s): POST /v2/models/%s/infer\n",
		opts.Name, len(s.sessions), threadsOf(m, opts.Threads), s.cfg.MaxQueue, batching, opts.Name)
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	timeout := opts.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	fmt.Fprintf(log, "serve: draining: answering requests in flight (at most %s)\n", timeout)
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	derr := s.Shutdown(dctx)
	// Answers already written reach their clients; idle keep-alive connections are closed.
	herr := srv.Shutdown(dctx)
	if gsrv != nil {
		stopGRPC(dctx, gsrv)
	}
	if err := errors.Join(derr, herr); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(log, "serve: drained")
	return nil
}

// stopGRPC lets the answers in flight reach their clients, and cuts them off when ctx ends.
func stopGRPC(ctx context.Context, g *grpc.Server) {
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		g.Stop()
		<-stopped
	}
}

func threadsOf(m *torchspeed.Model, override int) int {
	if override > 0 {
		return override
	}
	if m.Manifest != nil && m.Manifest.Runtime.Threads > 0 {
		return m.Manifest.Runtime.Threads
	}
	return 0
}
