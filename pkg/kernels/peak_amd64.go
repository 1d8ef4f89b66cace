//go:build gc && !purego

package kernels

// asmBuilt says this build holds the assembly peak loops.
const asmBuilt = true

// In-register peak loops (peak_amd64.s). Each runs iters iterations of a
// fixed block of independent arithmetic chains and touches no memory.

// peakFMA256 runs 24 ymm vfmadd231ps per iteration (384 FLOP).
//
//go:noescape
func peakFMA256(iters int)

// peakFMA512 runs 24 zmm vfmadd231ps per iteration (768 FLOP).
//
//go:noescape
func peakFMA512(iters int)

// peakVNNI256 runs 24 VEX vpdpbusd ymm per iteration (768 MAC).
//
//go:noescape
func peakVNNI256(iters int)

// peakVNNI512 runs 24 vpdpbusd zmm per iteration (1536 MAC).
//
//go:noescape
func peakVNNI512(iters int)

// peakMADD256 runs 8 vpmaddubsw+vpmaddwd+vpaddd ymm per iteration (256 MAC).
//
//go:noescape
func peakMADD256(iters int)

// peakMADD512 runs 8 vpmaddubsw+vpmaddwd+vpaddd zmm per iteration (512 MAC).
//
//go:noescape
func peakMADD512(iters int)

// clockLoop runs 100 dependent register adds per iteration.
//
//go:noescape
func clockLoop(iters int)

// streamReadAVX2 reads n bytes (a multiple of 128) and returns a fold of them.
//
//go:noescape
func streamReadAVX2(p *byte, n int) uint64

// peakLoops lists the compute loops usable here, per path.
func peakLoops() []peakLoop {
	return []peakLoop{
		{"fp32", AVX2, "avx2-fma (ymm vfmadd231ps)", 384, peakFMA256, 8},
		{"fp32", AVX512, "avx512-fma (zmm vfmadd231ps)", 768, peakFMA512, 16},
		{"int8", AVX2, "avx2 (ymm vpmaddubsw+vpmaddwd+vpaddd)", 2 * 256, peakMADD256, 0},
		{"int8", AVXVNNI, "avx-vnni (ymm vpdpbusd)", 2 * 768, peakVNNI256, 32},
		{"int8", AVX512, "avx512bw (zmm vpmaddubsw+vpmaddwd+vpaddd)", 2 * 512, peakMADD512, 0},
		{"int8", AVX512VNNI, "avx512-vnni (zmm vpdpbusd)", 2 * 1536, peakVNNI512, 64},
	}
}

// clockCycles runs about cycles dependent adds: the frequency probe.
func clockCycles(iters int) (cyclesPerIter float64) {
	clockLoop(iters)
	return 100
}

const clockMeasured = true

// streamRead reads all of p.
func streamRead(p []byte) uint64 {
	n := len(p) &^ 127
	var s uint64
	if n > 0 {
		if detected.supports(AVX2) {
			s = streamReadAVX2(&p[0], n)
		} else {
			s = streamReadGo(p[:n])
		}
	}
	return s + streamReadGo(p[n:])
}
