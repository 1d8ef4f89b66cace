package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/version"
)

type versionInfo struct {
	Torchspeed    string   `json:"torchspeed"`
	Go            string   `json:"go"`
	Libtorch      string   `json:"libtorch"`
	ShimAPI       int      `json:"shim_api"`
	QEngines      []string `json:"quantized_engines"`
	DefaultEngine string   `json:"default_engine"`
	OpenMP        string   `json:"openmp_runtime"`
	IntraThreads  int      `json:"intra_op_threads"`
}

func newVersionCmd(*ui) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print torchspeed, libtorch, quantized engines and OpenMP runtime",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			omp := "unknown"
			if p, err := cpu.Detect(cpu.Options{}); err == nil && p.OpenMPRuntime() != "" {
				omp = p.OpenMPRuntime()
			}
			info, err := torch.Info()
			if err != nil {
				return err
			}
			v := versionInfo{
				Torchspeed:    version.Version,
				Go:            runtime.Version(),
				Libtorch:      info.Version,
				ShimAPI:       torch.ShimAPIVersion(),
				QEngines:      info.QEngines,
				DefaultEngine: info.QEngine,
				OpenMP:        omp,
				IntraThreads:  info.NumThreads,
			}
			out := c.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			fmt.Fprintf(out, "torchspeed %s (%s)\n", v.Torchspeed, v.Go)
			fmt.Fprintf(out, "libtorch   %s (shim API %d)\n", v.Libtorch, v.ShimAPI)
			fmt.Fprintf(out, "engines    %v (current: %s)\n", v.QEngines, v.DefaultEngine)
			fmt.Fprintf(out, "openmp     %s\n", v.OpenMP)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
