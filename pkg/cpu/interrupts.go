package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Gap is a stretch of time in which a spinning thread did not run: an interrupt, a hypervisor
// exit, another thread on its CPU.
type Gap struct {
	// At is the time from the start of the measurement at which the thread stopped running.
	At time.Duration `json:"at_ns"`
	// Len is how long it did not run.
	Len time.Duration `json:"len_ns"`
}

// GapTrace is what one thread, pinned to one CPU, saw while it read the clock back to back:
// every gap longer than Threshold between two reads.
type GapTrace struct {
	CPU       int           `json:"cpu"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Threshold time.Duration `json:"threshold_ns"`
	// Reads is the number of clock reads; Elapsed/Reads is the loop's own step.
	Reads int64 `json:"reads"`
	// Count, Lost and Longest cover every gap; Gaps holds the first ones (a bounded buffer).
	Count   int64         `json:"count"`
	Lost    time.Duration `json:"lost_ns"`
	Longest time.Duration `json:"longest_ns"`
	Gaps    []Gap         `json:"-"`
}

// GapMeasurer spins on the calling thread for d and returns the gaps longer than threshold,
// keeping at most max of them. bindings/torch.MeasureGaps is one: the loop must run outside
// the Go scheduler, whose preemption signals would show up as gaps.
type GapMeasurer func(d, threshold time.Duration, max int) (GapTrace, error)

// InterruptOptions say how to measure interruptions.
type InterruptOptions struct {
	// CPUs are measured at once, one pinned thread each (all CPUs busy, as in a run that uses
	// them all). Empty means the process's affinity mask.
	CPUs []int
	// Count, when above 0, measures only the first Count of them (a run with that many threads).
	Count int
	// Duration of the measurement; 0 means 500 ms.
	Duration time.Duration
	// Threshold is the shortest gap counted; 0 means 2 µs (a clock read takes 20-50 ns).
	Threshold time.Duration
}

// CPUInterruptions sums up one CPU's trace.
type CPUInterruptions struct {
	CPU int `json:"cpu"`
	// PerSecond is how many gaps longer than the threshold the CPU had per second.
	PerSecond float64 `json:"per_second"`
	// LostFraction is the share of the time the thread did not run.
	LostFraction float64       `json:"lost_fraction"`
	P50          time.Duration `json:"p50_ns"`
	P99          time.Duration `json:"p99_ns"`
	Longest      time.Duration `json:"longest_ns"`
}

// Interruptions is what the machine takes from threads that want to run: measured on several
// CPUs at once, each by a thread that does nothing but read the clock.
type Interruptions struct {
	Duration  time.Duration      `json:"duration_ns"`
	Threshold time.Duration      `json:"threshold_ns"`
	CPUs      []CPUInterruptions `json:"cpus"`
	// PerSecond and LostFraction are the mean over the CPUs; P50 and P99 are of the gaps
	// of all CPUs pooled (those kept).
	PerSecond    float64       `json:"per_second"`
	LostFraction float64       `json:"lost_fraction"`
	P50          time.Duration `json:"p50_ns"`
	P99          time.Duration `json:"p99_ns"`
	Longest      time.Duration `json:"longest_ns"`
	// Floors are the p95/p50 that these gaps alone give calls of fixed work, for a few
	// call lengths (Floor computes others).
	Floors []TailFloor `json:"floors"`

	traces []GapTrace
}

// TailFloor is the p95/p50 of a call that always does the same work on Threads threads,
// Length long when nothing interrupts it, from the measured gaps alone.
type TailFloor struct {
	Length  time.Duration `json:"length_ns"`
	Threads int           `json:"threads"`
	P95P50  float64       `json:"p95_over_p50"`
}

// gapsToKeep bounds the buffer each CPU's gaps go to (16 bytes each, and as much again on the
// C side): 10,000 a second of measurement (this VM had 1,000-5,500), at least 1,024, at most
// 65,536, so that a probe of hundreds of CPUs stays within tens of megabytes. A trace that
// overflows still counts every gap; Floor then declines to replay it.
func gapsToKeep(d time.Duration) int {
	return min(1<<16, max(1024, int(d.Seconds()*10000)))
}

// MeasureInterruptions runs measure on every CPU in o.CPUs at once, each on its own OS thread
// pinned to that CPU, and sums up what they saw.
func MeasureInterruptions(o InterruptOptions, measure GapMeasurer) (*Interruptions, error) {
	if measure == nil {
		return nil, errors.New("interruptions: no gap measurer")
	}
	cpus := o.CPUs
	if len(cpus) == 0 {
		cpus = liveAffinity()
	}
	if len(cpus) == 0 {
		return nil, errors.New("interruptions: no CPU to measure (the affinity mask is unreadable)")
	}
	if o.Count > 0 && o.Count < len(cpus) {
		cpus = cpus[:o.Count]
	}
	d := o.Duration
	if d == 0 {
		d = 500 * time.Millisecond
	}
	thr := o.Threshold
	if thr == 0 {
		thr = 2 * time.Microsecond
	}
	if d < 10*time.Millisecond || d > time.Minute {
		return nil, fmt.Errorf("interruptions: duration %v: want 10ms to 1m", d)
	}
	traces := make([]GapTrace, len(cpus))
	errs := make([]error, len(cpus))
	var wg sync.WaitGroup
	for i, c := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The thread goes back to the scheduler only with its own mask back; otherwise
			// it stays locked and ends with the goroutine, and no other goroutine runs pinned.
			runtime.LockOSThread()
			restore, err := pinCurrentThread(c)
			if err != nil {
				errs[i] = fmt.Errorf("interruptions: pin to CPU %d: %w", c, err)
				return
			}
			defer func() {
				if restore() == nil {
					runtime.UnlockOSThread()
				}
			}()
			t, err := measure(d, thr, gapsToKeep(d))
			if err != nil {
				errs[i] = fmt.Errorf("interruptions on CPU %d: %w", c, err)
				return
			}
			t.CPU = c
			traces[i] = t
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return SummarizeGaps(traces)
}

// DurationFor is how long to measure for Floor to answer at call length p50: enough for
// FloorFits+10 calls, at least atLeast, at most 5 s (longer calls get no floor: at 0.1 s and
// more the gaps this measures hardly move a p95).
func DurationFor(p50, atLeast time.Duration) time.Duration {
	return max(atLeast, min(5*time.Second, time.Duration(FloorFits+10)*p50))
}

// floorLengths are the call lengths Interruptions.Floors reports.
var floorLengths = []time.Duration{100 * time.Microsecond, time.Millisecond, 10 * time.Millisecond}

// SummarizeGaps sums up traces taken at the same time on different CPUs.
func SummarizeGaps(traces []GapTrace) (*Interruptions, error) {
	if len(traces) == 0 {
		return nil, errors.New("interruptions: no trace")
	}
	in := &Interruptions{Threshold: traces[0].Threshold, traces: traces}
	var all []time.Duration
	for _, t := range traces {
		if t.Elapsed <= 0 {
			return nil, fmt.Errorf("interruptions: CPU %d: the trace covers no time", t.CPU)
		}
		lens := make([]time.Duration, len(t.Gaps))
		for i, g := range t.Gaps {
			lens[i] = g.Len
		}
		slices.Sort(lens)
		all = append(all, lens...)
		c := CPUInterruptions{
			CPU:          t.CPU,
			PerSecond:    float64(t.Count) / t.Elapsed.Seconds(),
			LostFraction: float64(t.Lost) / float64(t.Elapsed),
			P50:          quantile(lens, 0.50),
			P99:          quantile(lens, 0.99),
			Longest:      t.Longest,
		}
		in.CPUs = append(in.CPUs, c)
		in.PerSecond += c.PerSecond / float64(len(traces))
		in.LostFraction += c.LostFraction / float64(len(traces))
		in.Duration = max(in.Duration, t.Elapsed)
		in.Longest = max(in.Longest, t.Longest)
	}
	slices.Sort(all)
	in.P50, in.P99 = quantile(all, 0.50), quantile(all, 0.99)
	for _, l := range floorLengths {
		for _, th := range []int{1, len(traces)} {
			if r, ok := in.Floor(l, th); ok {
				in.Floors = append(in.Floors, TailFloor{Length: l, Threads: th, P95P50: r})
			}
			if len(traces) == 1 {
				break
			}
		}
	}
	return in, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// FloorFits is how many calls back to back a trace must hold for Floor to answer.
const FloorFits = 50

// floorStarts is the number of call start times Floor replays.
const floorStarts = 20000

// Floor replays calls of fixed work over the measured gaps: calls that need length of running
// time on each of threads CPUs (the first threads traces), started at floorStarts evenly spaced
// times, each ending when its slowest thread is done. It returns their p95/p50: the tail a
// model of that length and thread count has on this machine whatever runs it. It is false when
// the traces hold fewer than FloorFits such calls, or a trace's gaps overflowed its buffer.
func (in *Interruptions) Floor(length time.Duration, threads int) (float64, bool) {
	if in == nil || length <= 0 || threads < 1 || threads > len(in.traces) {
		return 0, false
	}
	span := in.Duration
	for _, t := range in.traces[:threads] {
		if int64(len(t.Gaps)) < t.Count {
			return 0, false
		}
		span = min(span, t.Elapsed)
	}
	// Leave room for the slowest call: the length plus every gap that may fall in it.
	room := span - 2*length - in.Longest
	if room < FloorFits*length {
		return 0, false
	}
	el := make([]float64, floorStarts)
	for i := range el {
		// The caller (the first thread) cannot start its clock inside one of its own gaps.
		start := resume(in.traces[0].Gaps, time.Duration(int64(room)*int64(i)/floorStarts))
		var end time.Duration
		for _, t := range in.traces[:threads] {
			end = max(end, finish(t.Gaps, start, length))
		}
		el[i] = float64(end - start)
	}
	sort.Float64s(el)
	p50, p95 := el[len(el)/2], el[len(el)*95/100]
	return p95 / p50, true
}

// AddFloor keeps in Floors the p95/p50 the gaps alone give fixed work of length on threads
// threads (at most as many as CPUs were measured), once per length, and returns it; false when
// Floor cannot answer (traces too short, or read back from JSON without them).
func (in *Interruptions) AddFloor(length time.Duration, threads int) (TailFloor, bool) {
	if f, ok := in.FloorAt(length); ok || in == nil {
		return f, ok
	}
	threads = max(1, min(threads, len(in.CPUs)))
	r, ok := in.Floor(length, threads)
	if !ok {
		return TailFloor{}, false
	}
	f := TailFloor{Length: length, Threads: threads, P95P50: r}
	in.Floors = append(in.Floors, f)
	return f, true
}

// FloorAt is the floor kept for calls of length, false when there is none (or in is nil).
func (in *Interruptions) FloorAt(length time.Duration) (TailFloor, bool) {
	if in == nil {
		return TailFloor{}, false
	}
	for _, f := range in.Floors {
		if f.Length == length {
			return f, true
		}
	}
	return TailFloor{}, false
}

// resume is t, or the end of the gap t falls in.
func resume(gaps []Gap, t time.Duration) time.Duration {
	i := sort.Search(len(gaps), func(i int) bool { return gaps[i].At+gaps[i].Len > t })
	if i < len(gaps) && gaps[i].At <= t {
		return gaps[i].At + gaps[i].Len
	}
	return t
}

// finish is when a thread that starts at start (or when it next runs) and needs length of
// running time is done, given its gaps in time order.
func finish(gaps []Gap, start, length time.Duration) time.Duration {
	i := sort.Search(len(gaps), func(i int) bool { return gaps[i].At+gaps[i].Len > start })
	t, left := start, length
	if i < len(gaps) && gaps[i].At <= start {
		t = gaps[i].At + gaps[i].Len // it starts once the gap it fell in is over
		i++
	}
	for ; i < len(gaps); i++ {
		run := gaps[i].At - t
		if run >= left {
			break
		}
		left -= run
		t = gaps[i].At + gaps[i].Len
	}
	return t + left
}

// writeText prints the measurement as probe's "Interrupts" lines.
func (in *Interruptions) writeText(pf func(string, ...any)) {
	cpus := make([]int, len(in.CPUs))
	for i, c := range in.CPUs {
		cpus[i] = c.CPU
	}
	pf("Interrupts  CPUs %s all busy for %v: %.0f/s per CPU longer than %v, %.1f%% of the time lost; length p50 %v p99 %v, longest %v\n",
		CPUSet(cpus), in.Duration.Round(time.Millisecond), in.PerSecond, in.Threshold, 100*in.LostFraction,
		roundDur(in.P50), roundDur(in.P99), roundDur(in.Longest))
	if len(in.Floors) == 0 {
		return
	}
	var parts []string
	for _, f := range in.Floors {
		parts = append(parts, fmt.Sprintf("%v on %d thread(s) %.2f", f.Length, f.Threads, f.P95P50))
	}
	pf("            p95/p50 they alone give fixed work: %s\n", strings.Join(parts, ", "))
}

// roundDur rounds to a precision that suits gaps: 0.1 µs below 10 µs, 1 µs below 10 ms.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	case d < 10*time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}

// interruptLostWarn is the share of CPU time lost to interruptions from which probe warns:
// a bare-metal server with a tick-less kernel loses well under 0.1%, a shared VM several
// percent (docs/architecture.md).
const interruptLostWarn = 0.01

func interruptFinding(in *Interruptions) *Finding {
	if in == nil || in.LostFraction < interruptLostWarn {
		return nil
	}
	msg := fmt.Sprintf("the CPUs lose %.1f%% of their time in %.0f interruptions a second (length p50 %v, p99 %v) taken by the host, not by this process: the hypervisor, device interrupts or other processes ran instead of it, and no setting of this process gives that time back",
		100*in.LostFraction, in.PerSecond, roundDur(in.P50), roundDur(in.P99))
	var floors []string
	for _, f := range in.Floors {
		if f.Threads == 1 && f.P95P50 >= 1.05 {
			floors = append(floors, fmt.Sprintf("%.2f at %v", f.P95P50, f.Length))
		}
	}
	if len(floors) > 0 {
		msg += "; from them alone, a call of fixed work on one thread has p95/p50 " + strings.Join(floors, ", ")
	}
	return &Finding{
		Severity: Warning,
		Code:     "cpu-interruptions",
		Message:  msg,
		Fix:      "for tight tails run on dedicated hosts or CPUs kept free of interrupts (isolcpus, nohz_full, irqaffinity); judge a model's p95/p50 against the floor torchspeed bench measures beside it",
	}
}
