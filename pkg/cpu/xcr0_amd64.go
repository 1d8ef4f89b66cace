//go:build amd64 && gc && !purego

package cpu

// xgetbv0 returns XCR0, the register in which the operating system says which register
// states (SSE, AVX, AVX-512, AMX tiles) it saves on a context switch. An instruction set
// the CPU has but XCR0 leaves out faults when used.
//
//go:noescape
func xgetbv0() (eax, edx uint32)

func readXCR0(osxsave bool) (uint64, bool) {
	// XGETBV is an illegal instruction unless the OS set CR4.OSXSAVE.
	if !osxsave {
		return 0, false
	}
	eax, edx := xgetbv0()
	return uint64(edx)<<32 | uint64(eax), true
}
