package torch

/*
#include "torchspeed.h"
*/
import "C"

import (
	"fmt"
	"time"

	"github.com/torchspeed/torchspeed/pkg/cpu"
)

// MeasureGaps spins on the calling OS thread for d, reading the clock back to back, and
// returns every gap longer than threshold between two reads: the time the machine took the
// thread's CPU away (interrupts, the hypervisor, other threads). The first max gaps are kept;
// the counts cover all. It is a cpu.GapMeasurer: pin the thread (cpu.MeasureInterruptions
// does) to measure one CPU.
//
// The loop is C, inside one cgo call: the Go scheduler does not signal a thread that is in a
// cgo call, so its preemption requests are not counted as gaps.
func MeasureGaps(d, threshold time.Duration, max int) (cpu.GapTrace, error) {
	if d <= 0 || d > time.Minute {
		return cpu.GapTrace{}, fmt.Errorf("torch: gap measurement of %v: want (0, 1m]", d)
	}
	if threshold <= 0 {
		return cpu.GapTrace{}, fmt.Errorf("torch: gap threshold %v: want > 0", threshold)
	}
	if max < 0 || max > 1<<24 {
		return cpu.GapTrace{}, fmt.Errorf("torch: %d gaps to keep: want 0 to %d", max, 1<<24)
	}
	at := make([]C.int64_t, max)
	ln := make([]C.int64_t, max)
	var atp, lnp *C.int64_t
	if max > 0 {
		atp, lnp = &at[0], &ln[0]
	}
	var tot C.ts_gap_totals
	if err := statusErr(C.ts_measure_gaps(C.int64_t(d), C.int64_t(threshold), atp, lnp, C.size_t(max), &tot)); err != nil {
		return cpu.GapTrace{}, err
	}
	t := cpu.GapTrace{
		Elapsed:   time.Duration(tot.elapsed_ns),
		Threshold: threshold,
		Reads:     int64(tot.reads),
		Count:     int64(tot.count),
		Lost:      time.Duration(tot.lost_ns),
		Longest:   time.Duration(tot.longest_ns),
		Gaps:      make([]cpu.Gap, int(tot.kept)),
	}
	for i := range t.Gaps {
		t.Gaps[i] = cpu.Gap{At: time.Duration(at[i]), Len: time.Duration(ln[i])}
	}
	return t, nil
}
