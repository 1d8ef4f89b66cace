package torch_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// Info gathers what pkg/cpu's probe needs from libtorch, consistent with the single queries.
func TestInfo(t *testing.T) {
	info, err := torch.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != torch.Version() || !strings.Contains(info.ShowConfig, "PyTorch built with") || info.ParallelInfo == "" {
		t.Errorf("version %q, show_config %.40q, parallel info %.40q", info.Version, info.ShowConfig, info.ParallelInfo)
	}
	if !slices.Contains(info.QEngines, info.QEngine) || info.NumThreads < 1 || info.NumInteropThreads < 1 {
		t.Errorf("engines %v (current %q), threads %d, inter-op %d", info.QEngines, info.QEngine, info.NumThreads, info.NumInteropThreads)
	}
}
