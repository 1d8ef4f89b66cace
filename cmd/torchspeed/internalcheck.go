package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/internal/mkldnncheck"
	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// newInternalCmd holds hidden subcommands torchspeed runs as child processes of itself.
func newInternalCmd(*ui) *cobra.Command {
	c := &cobra.Command{Use: "internal", Short: "torchspeed's own child processes", Hidden: true}
	c.AddCommand(&cobra.Command{
		Use:   "mkldnn-check",
		Short: "Run libtorch's oneDNN (MKLDNN) kernels once: exits 0 when they work",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return mkldnncheck.Probe() },
	})
	return c
}

// checkMKLDNN runs `torchspeed internal mkldnn-check` in a child process and returns why
// oneDNN cannot be used here ("" when it works). A oneDNN that dies by a signal would take
// this process with it; a child's death is only a reason to skip its passes. A child that
// cannot be started leaves the passes on, with a warning.
func checkMKLDNN(ctx context.Context, warn func(string)) string {
	reason, _ := runMKLDNNCheck(ctx, warn)
	return reason
}

// oneDNNCheck is the check as probe reports it (cpu.TorchInfo.OneDNNCheck): cpu.OneDNNPassed,
// why oneDNN cannot be trusted here, or "" when the child could not be started (with a warning).
func oneDNNCheck(ctx context.Context, warn func(string)) string {
	reason, ran := runMKLDNNCheck(ctx, warn)
	switch {
	case !ran:
		return ""
	case reason == "":
		return cpu.OneDNNPassed
	}
	return reason
}

func runMKLDNNCheck(ctx context.Context, warn func(string)) (reason string, ran bool) {
	exe, err := os.Executable()
	if err != nil {
		warn(fmt.Sprintf("oneDNN check not run: %v", err))
		return "", false
	}
	t0 := time.Now()
	reason, err = mkldnncheck.Check(ctx, exec.Command(exe, "internal", "mkldnn-check"))
	if err != nil {
		warn(fmt.Sprintf("oneDNN check not run: %v", err))
		return "", false
	}
	if os.Getenv("TORCHSPEED_DEBUG_MKLDNN_CHECK") != "" {
		warn(fmt.Sprintf("oneDNN check took %v: %q", time.Since(t0).Round(time.Millisecond), reason))
	}
	return reason, true
}
