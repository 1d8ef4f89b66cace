package cpu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTorchInfoParse(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name                                      string
		info                                      TorchInfo
		onednn, mkl, openmp, capab, backend, blas string
	}{
		{
			// Captured from Debian 12's python3-torch 1.13.1 on this machine.
			name:   "debian 1.13",
			info:   TorchInfo{ShowConfig: read("torch-1.13-debian.show_config.txt"), ParallelInfo: read("torch-1.13-debian.parallel_info.txt")},
			onednn: "v2.6.3", mkl: "", openmp: "201511 (a.k.a. OpenMP 4.5)", capab: "AVX2", backend: "OpenMP", blas: "generic",
		},
		{
			// The layout of the official 2.1 CPU build (MKL, oneDNN 3), abbreviated.
			name:   "official 2.1",
			info:   TorchInfo{ShowConfig: read("torch-2.1-official.show_config.txt")},
			onednn: "v3.1.1", mkl: "Intel(R) oneAPI Math Kernel Library Version 2022.2-Product Build 20220804 for Intel(R) 64 architecture applications",
			openmp: "201511 (a.k.a. OpenMP 4.5)", capab: "AVX512", backend: "", blas: "mkl",
		},
		{name: "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ti := tc.info
			ti.parse()
			if ti.OneDNN != tc.onednn || ti.MKL != tc.mkl || ti.OpenMP != tc.openmp || ti.CPUCapability != tc.capab || ti.ParallelBackend != tc.backend {
				t.Errorf("parsed onednn=%q mkl=%q openmp=%q capability=%q backend=%q", ti.OneDNN, ti.MKL, ti.OpenMP, ti.CPUCapability, ti.ParallelBackend)
			}
			if ti.Build["BLAS_INFO"] != tc.blas {
				t.Errorf("BLAS_INFO = %q, want %q", ti.Build["BLAS_INFO"], tc.blas)
			}
			if tc.blas != "" && (ti.Build["USE_MKLDNN"] != "ON" || ti.Build["USE_OPENMP"] != "ON") {
				t.Errorf("build settings %v lack USE_MKLDNN/USE_OPENMP", ti.Build)
			}
		})
	}
}
