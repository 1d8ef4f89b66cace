package runenv

import (
	"fmt"
	"slices"
	"strings"
)

// CheckISAEnv refuses the instruction-set variables of the environment (getenv: os.LookupEnv)
// that name kernels machine m cannot run. ATen in libtorch 1.13 dispatches to whatever
// ATEN_CPU_CAPABILITY names without asking the CPU, and OpenBLAS forces OPENBLAS_CORETYPE's
// kernels: either stops the process on an illegal instruction at the first call that reaches
// them, in the middle of serving. Call it before libtorch runs anything. ONEDNN_MAX_CPU_ISA (and
// DNNL_MAX_CPU_ISA) is a ceiling that oneDNN lowers to the CPU's own, so it is never refused.
func CheckISAEnv(getenv func(string) (string, bool), m Machine) error {
	where := "this CPU"
	if m.Name != "" {
		where = "this CPU (" + m.Name + ")"
	}
	if v, ok := getenv("ATEN_CPU_CAPABILITY"); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "avx512":
			if !m.AVX512 {
				return fmt.Errorf("ATEN_CPU_CAPABILITY=%s is set, but %s lacks AVX-512 F/BW/VL/DQ: ATen would run AVX-512 kernels and stop on an illegal instruction; unset it or set it to avx2", v, where)
			}
		case "avx2":
			if !m.AVX2 {
				return fmt.Errorf("ATEN_CPU_CAPABILITY=%s is set, but %s lacks AVX2 and FMA: ATen would stop on an illegal instruction; unset it or set it to default", v, where)
			}
		}
	}
	if v, ok := getenv("OPENBLAS_CORETYPE"); ok && v != "" {
		core := strings.TrimSpace(v)
		avx512 := slices.ContainsFunc(openBLASAVX512Cores, func(c string) bool { return strings.EqualFold(c, core) })
		switch {
		case avx512 && !m.AVX512:
			return fmt.Errorf("OPENBLAS_CORETYPE=%s is set, but %s lacks AVX-512 F/BW/VL/DQ: OpenBLAS would stop on an illegal instruction at the first float matmul; unset it", v, where)
		case avx512 && !strings.EqualFold(core, "SkylakeX") && !m.BF16:
			return fmt.Errorf("OPENBLAS_CORETYPE=%s is set, but %s lacks AVX512_BF16, which those kernels use; unset it or set it to SkylakeX", v, where)
		case (strings.EqualFold(core, "Haswell") || strings.EqualFold(core, "Zen")) && !m.AVX2:
			return fmt.Errorf("OPENBLAS_CORETYPE=%s is set, but %s lacks AVX2 and FMA: OpenBLAS would stop on an illegal instruction; unset it", v, where)
		}
	}
	return nil
}
