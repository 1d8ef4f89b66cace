//go:build !amd64 || !gc || purego

package kernels

// asmBuilt says this build holds no assembly: only the generic path runs.
const asmBuilt = false

var (
	asmDotF32   []dotF32Impl
	asmGemmF32  []gemmF32Impl
	asmDotU8S8  []dotU8S8Impl
	asmGemmU8S8 []gemmU8S8Impl
	asmQuant    []quantImpl
)
