package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/config"
	"github.com/torchspeed/torchspeed/pkg/serve"
)

func newServeCmd(_ *ui) *cobra.Command {
	var o serve.Options
	c := &cobra.Command{
		Use:   "serve -m ARTIFACT [--http HOST:PORT] [--grpc HOST:PORT] [--instances N]",
		Short: "Serve an artifact over the Open Inference Protocol (KServe v2), as Triton does",
		Long: `serve loads an artifact (with its load-time passes and measured threads) and answers the Open
Inference Protocol's REST endpoints, so that clients and load generators written for Triton or
KServe work unchanged:

  GET  /v2/health/live, /v2/health/ready, /v2
  GET  /v2/models/NAME            metadata: inputs and outputs with datatype and shape
  GET  /v2/models/NAME/ready
  POST /v2/models/NAME/infer      JSON tensors in, JSON tensors out
  GET  /metrics                   Prometheus text: requests, latency, queue time, in flight

With --grpc, the same over gRPC (inference.GRPCInferenceService from KServe's
grpc_predict_v2.proto): ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata,
ModelInfer (raw_input_contents or typed contents). A full queue answers RESOURCE_EXHAUSTED, a
malformed request INVALID_ARGUMENT, a draining server UNAVAILABLE.

At one thread a request runs the model on its own goroutine's thread, at most --instances at
once; at more, each of --instances runs on its own OS thread with its own OpenMP pool. Requests
wait in one queue of --max-queue, beyond which they are answered 429. --max-batch N joins
requests that arrive within --batch-delay into one call of up to N samples (inputs batched along
dimension 0). SIGTERM or SIGINT drain the server: readiness turns false, new requests get 503,
requests in flight are answered, exit 0.`,
		Example: `  torchspeed serve -m out/resnet18.torchspeed.pt --http 0.0.0.0:8000 --instances 2
  curl -s localhost:8000/v2/models/resnet18`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.Model == "" {
				return exitcode.Usagef("serve: --model (-m) is required")
			}
			if _, err := os.Stat(o.Model); err != nil {
				return exitcode.Usagef("serve: model %q: %v", o.Model, err)
			}
			if err := config.CheckThreads("serve: --threads", o.Threads, "the artifact's"); err != nil {
				return exitcode.New(exitcode.Usage, err)
			}
			for _, a := range []struct{ flag, addr string }{{"--http", o.Addr}, {"--grpc", o.GRPCAddr}} {
				if a.addr == "" && a.flag == "--grpc" {
					continue
				}
				if err := serve.CheckAddr(a.addr); err != nil {
					return exitcode.Usagef("serve: %s %q: %v", a.flag, a.addr, err)
				}
			}
			if o.Name == "" {
				o.Name = serve.NameOf(o.Model)
			}
			if err := o.Config.Validate(); err != nil {
				return exitcode.Usagef("serve: %v", err)
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve.Run(ctx, o, c.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.StringVarP(&o.Model, "model", "m", "", "artifact written by torchspeed optimize (or a TorchScript file)")
	f.StringVar(&o.Name, "name", "", "model name in URLs (default: the file name without .torchspeed.pt)")
	f.StringVar(&o.Addr, "http", "127.0.0.1:8000", "HTTP listen address, host:port (port 0: any free port)")
	f.StringVar(&o.GRPCAddr, "grpc", "", "gRPC listen address, host:port (port 0: any free port; default: no gRPC)")
	f.IntVar(&o.Instances, "instances", 1, "model instances answering side by side, each on its own OS thread at more than one thread")
	f.IntVar(&o.Threads, "threads", 0, "intra-op threads per instance (0: the artifact's measured count)")
	f.IntVar(&o.MaxQueue, "max-queue", serve.DefaultMaxQueue, "requests that may wait for an instance; more are answered 429 (-1: none wait)")
	f.Int64Var(&o.MaxRequestBytes, "max-request-bytes", serve.DefaultMaxRequestBytes, "largest request body; larger ones are answered 413")
	f.IntVar(&o.MaxBatch, "max-batch", 0, "dynamic batching: join requests arriving within --batch-delay, up to this many samples (0 or 1: off)")
	f.DurationVar(&o.BatchDelay, "batch-delay", 0, "dynamic batching: how long the first request of a batch waits for more")
	f.DurationVar(&o.DrainTimeout, "drain-timeout", serve.DefaultDrainTimeout, "longest wait for requests in flight on SIGTERM")
	f.StringArrayVar(&o.OpLibraries, "op-library", nil, "shared library of custom operators the model calls, loaded before it (repeat)")
	return c
}
