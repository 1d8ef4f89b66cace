package kernels

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/cpuid/v2"
)

// PeakOptions configures MeasurePeak. The zero value measures on every CPU
// this process may use, 200 ms per figure, best 2 ms burst.
type PeakOptions struct {
	// CPUs are the logical CPUs for the all-cores figures: one goroutine per
	// entry, each on its own locked OS thread bound to that CPU (Linux).
	// Empty means every CPU in the process's affinity mask. The per-core
	// figures run on CPUs[0].
	CPUs []int
	// Duration is the time spent on each figure (default 200 ms).
	Duration time.Duration
	// Burst is the length of one timed run (default 2 ms). Each figure is
	// the best burst within Duration: interference only ever slows a run
	// down, and short bursts are rarely preempted even on a busy machine.
	// Bandwidth runs are one full pass over the buffer each.
	Burst time.Duration
	// MemoryBytes is the bandwidth buffer size; default 8x the last-level
	// cache, at least 256 MiB, so the caches cannot hold it.
	MemoryBytes int64
	// SkipMemory leaves out the bandwidth figures.
	SkipMemory bool
	// FMAPerCycle overrides the assumed number of full-width vector FMA (and
	// VNNI) instructions a core issues per cycle, for 256- and 512-bit
	// vectors, in the theoretical figures. Zero means the built-in table.
	FMAPerCycle256, FMAPerCycle512 float64
}

// PeakResult is what MeasurePeak found. Rates are per second: FLOP/s
// counts a multiply-add as 2 FLOP, INT8 OP/s counts a u8 x s8 multiply-add as
// 2 OP, bandwidth is bytes/s (copy counts bytes read plus bytes written).
type PeakResult struct {
	CPUModel string   `json:"cpu_model"`
	Features Features `json:"features"`
	CPUs     []int    `json:"cpus"`
	// Pinned says whether the all-cores threads were bound to their CPUs.
	Pinned bool `json:"pinned"`
	// FrequencyHz is the core clock used for the theoretical figures.
	FrequencyHz float64 `json:"frequency_hz"`
	// FrequencySource says where FrequencyHz came from: "measured
	// (dependent-add loop)", "/proc/cpuinfo (cpu MHz, max)" or "cpuid".
	FrequencySource string `json:"frequency_source"`
	// FP32 and INT8 hold one figure per instruction sequence measured.
	FP32 []ComputeFigure `json:"fp32"`
	INT8 []ComputeFigure `json:"int8"`
	// Memory is absent with SkipMemory.
	Memory *MemoryFigure `json:"memory,omitempty"`
	// TheoreticalFP32 and TheoreticalINT8 are the per-core peaks of the
	// widest FMA and VNNI instructions the CPU has (whether or not this
	// build can run them): units x lanes x 2 x FrequencyHz. INT8 is 0
	// without VNNI. TheoreticalNote spells out the terms.
	TheoreticalFP32 float64 `json:"theoretical_fp32_per_core"`
	TheoreticalINT8 float64 `json:"theoretical_int8_per_core"`
	TheoreticalNote string  `json:"theoretical_note"`
	// BestFP32 and BestINT8 are the highest all-cores rates above (FLOP/s,
	// OP/s): the compute roofs.
	BestFP32 float64 `json:"best_fp32_flops"`
	BestINT8 float64 `json:"best_int8_ops"`
	// Duration and Burst are the settings used.
	Duration time.Duration `json:"duration_ns"`
	Burst    time.Duration `json:"burst_ns"`
}

// ComputeFigure is one in-register compute loop's measured and theoretical
// rates.
type ComputeFigure struct {
	// ISA names the instruction sequence, e.g. "avx2-fma (ymm vfmadd231ps)".
	ISA      string  `json:"isa"`
	Path     Path    `json:"path"`
	PerCore  float64 `json:"per_core"`
	AllCores float64 `json:"all_cores"`
	// TheoreticalPerCore is units x MACs per instruction x 2 x frequency;
	// zero when there is no dependable unit count for this sequence.
	TheoreticalPerCore  float64 `json:"theoretical_per_core"`
	TheoreticalAllCores float64 `json:"theoretical_all_cores"`
	// Assumption spells out the theoretical figure's terms.
	Assumption string `json:"assumption,omitempty"`
}

// MemoryFigure holds streaming bandwidths in bytes/s.
type MemoryFigure struct {
	BufferBytes  int64   `json:"buffer_bytes"`
	ReadPerCore  float64 `json:"read_per_core"`
	CopyPerCore  float64 `json:"copy_per_core"`
	ReadAllCores float64 `json:"read_all_cores"`
	CopyAllCores float64 `json:"copy_all_cores"`
}

// peakLoop is one in-register compute loop.
type peakLoop struct {
	kind       string // "fp32" or "int8"
	path       Path
	name       string
	opsPerIter float64
	fn         func(iters int)
	// macsPerInstr is multiply-adds per vector instruction, for the
	// theoretical figure; 0 when none is given.
	macsPerInstr float64
}

// MeasurePeak measures per-core and all-cores compute peaks and memory
// bandwidth. It takes about 2 x Duration per compute figure (13 of them
// with AVX-512 VNNI) plus the bandwidth passes.
func MeasurePeak(opts PeakOptions) (PeakResult, error) {
	cpus, err := opts.check()
	if err != nil {
		return PeakResult{}, err
	}
	res := PeakResult{
		CPUModel: cpuid.CPU.BrandName,
		Features: detected,
		CPUs:     cpus,
		Duration: opts.Duration,
		Burst:    opts.Burst,
	}
	r := runner{cpus: cpus, dur: opts.Duration, burst: opts.Burst}
	if err := r.start(); err != nil {
		return res, err
	}
	defer r.stop()
	res.Pinned = r.pinned

	_, res.FrequencySource = r.frequency()
	u256, u512, unitNote := fmaUnits(opts)
	theo := r.computeFigures(&res, u256, u512)
	// The clock was sampled between all the bursts above; its best sample
	// is the least disturbed one.
	if clockMeasured {
		res.FrequencyHz = r.clockHz
	} else {
		res.FrequencyHz, _ = r.frequency()
	}
	if res.FrequencyHz > 0 {
		res.theoretical(u256, u512, unitNote, theo)
	}
	if !opts.SkipMemory {
		m, err := r.memory(opts.MemoryBytes)
		if err != nil {
			return res, err
		}
		res.Memory = &m
	}
	return res, nil
}

// check fills in the defaults of o (in place) and returns the CPUs to run on, or says which
// option is out of range.
func (o *PeakOptions) check() ([]int, error) {
	if o.Duration == 0 {
		o.Duration = 200 * time.Millisecond
	}
	if o.Duration < time.Millisecond || o.Duration > time.Minute {
		return nil, fmt.Errorf("peak: duration %v out of range; use 1ms..1m", o.Duration)
	}
	if o.Burst == 0 {
		o.Burst = 2 * time.Millisecond
	}
	if o.Burst < 100*time.Microsecond || o.Burst > o.Duration {
		return nil, fmt.Errorf("peak: burst %v out of range; use 100us..duration (%v)", o.Burst, o.Duration)
	}
	if o.FMAPerCycle256 < 0 || o.FMAPerCycle512 < 0 {
		return nil, errors.New("peak: FMA units per cycle must not be negative")
	}
	cpus := o.CPUs
	if len(cpus) == 0 {
		cpus = allowedCPUs()
	}
	if len(cpus) == 0 {
		cpus = make([]int, runtime.NumCPU())
		for i := range cpus {
			cpus[i] = -1 // unknown ids: lock threads but do not bind
		}
	}
	if len(cpus) > runtime.GOMAXPROCS(0) {
		return nil, fmt.Errorf("peak: %d CPUs but GOMAXPROCS is %d: the threads could not run together; raise GOMAXPROCS or give fewer CPUs",
			len(cpus), runtime.GOMAXPROCS(0))
	}
	seen := map[int]bool{}
	for _, c := range cpus {
		if c != -1 && (c < 0 || seen[c]) {
			return nil, fmt.Errorf("peak: CPU list %v: %d is negative or repeated; give distinct CPU ids", o.CPUs, c)
		}
		seen[c] = true
	}
	return cpus, nil
}

// pendingTheory is a compute figure whose theoretical peak waits for the clock frequency,
// measured between the bursts of all figures.
type pendingTheory struct {
	int8  bool
	idx   int // into FP32 or INT8 (pointers would go stale on append)
	units float64
	width int
	macs  float64
}

// computeFigures times every peak loop this CPU and build can run, per core and on all cores,
// into res, and returns the figures that get a theoretical peak once the clock is known.
func (r *runner) computeFigures(res *PeakResult, u256, u512 float64) []pendingTheory {
	var theo []pendingTheory
	for _, l := range peakLoops() {
		if !detected.supports(l.path) {
			continue
		}
		f := ComputeFigure{ISA: l.name, Path: l.path}
		f.PerCore = r.rate(l.fn, l.opsPerIter, 1)
		f.AllCores = r.rate(l.fn, l.opsPerIter, len(r.cpus))
		units, width := u256, 256
		if l.path == AVX512 || l.path == AVX512VNNI {
			units, width = u512, 512
		}
		if l.kind == "fp32" {
			res.FP32 = append(res.FP32, f)
			res.BestFP32 = math.Max(res.BestFP32, f.AllCores)
		} else {
			res.INT8 = append(res.INT8, f)
			res.BestINT8 = math.Max(res.BestINT8, f.AllCores)
		}
		if l.macsPerInstr > 0 && units > 0 {
			p := pendingTheory{int8: l.kind != "fp32", idx: len(res.FP32) - 1, units: units, width: width, macs: l.macsPerInstr}
			if p.int8 {
				p.idx = len(res.INT8) - 1
			}
			theo = append(theo, p)
		}
	}
	return theo
}

// theoretical sets the machine's theoretical FP32 and INT8 peaks, and those of the figures in
// theo, from res.FrequencyHz (> 0) and the FMA units per cycle.
func (res *PeakResult) theoretical(u256, u512 float64, unitNote string, theo []pendingTheory) {
	units, lanes, isa := u256, 8.0, "256-bit FMA"
	switch f := detected; {
	case f.AVX512F && u512 > 0:
		units, lanes, isa = u512, 16, "512-bit FMA"
	case !(f.AVX2 && f.FMA):
		units, lanes, isa = 1, 4, "128-bit SSE mul+add (no FMA)"
	}
	res.TheoreticalFP32 = units * lanes * 2 * res.FrequencyHz
	note := fmt.Sprintf("FP32: %g x %s x %g lanes x 2 x %.3f GHz", units, isa, lanes, res.FrequencyHz/1e9)
	switch f := detected; {
	case f.AVX512VNNI && f.AVX512F && u512 > 0:
		res.TheoreticalINT8 = u512 * 64 * 2 * res.FrequencyHz
		note += fmt.Sprintf("; INT8: %g x 512-bit vpdpbusd x 64 multiply-adds x 2", u512)
	case f.AVXVNNI:
		res.TheoreticalINT8 = u256 * 32 * 2 * res.FrequencyHz
		note += fmt.Sprintf("; INT8: %g x 256-bit vpdpbusd x 32 multiply-adds x 2", u256)
	}
	res.TheoreticalNote = note + " (" + unitNote + "; frequency " + res.FrequencySource + ")"
	for _, p := range theo {
		var f *ComputeFigure
		if p.int8 {
			f = &res.INT8[p.idx]
		} else {
			f = &res.FP32[p.idx]
		}
		f.TheoreticalPerCore = p.units * p.macs * 2 * res.FrequencyHz
		f.TheoreticalAllCores = f.TheoreticalPerCore * float64(len(res.CPUs))
		f.Assumption = fmt.Sprintf("%g %d-bit units x %g multiply-adds per instruction x 2 x %.3f GHz (%s; %s)",
			p.units, p.width, p.macs, res.FrequencyHz/1e9, unitNote, res.FrequencySource)
	}
}

// fmaUnits returns vector FMA instructions per cycle for 256- and 512-bit
// vectors. Cores do not report this; the table covers the common designs
// and says it is an assumption.
func fmaUnits(opts PeakOptions) (u256, u512 float64, note string) {
	u256, u512 = 2, 2
	note = "assumed: 2 FMA pipes"
	if cpuid.CPU.VendorID == cpuid.AMD {
		switch f := cpuid.CPU.Family; {
		case f >= 0x1a: // Zen 5: two full-width 512-bit FMA pipes (server/desktop)
			note = "Zen 5 table: 2 FMA pipes, 512-bit datapath"
		case f == 0x19: // Zen 3/4: two 256-bit pipes; 512-bit ops take both halves
			u512 = 1
			note = "Zen 3/4 table: 2 x 256-bit FMA pipes, 512-bit ops double-pumped"
		case f == 0x17 && cpuid.CPU.Model < 0x30: // Zen 1: 128-bit pipes
			u256, u512 = 1, 0
			note = "Zen 1 table: 2 x 128-bit FMA pipes"
		}
	} else {
		note = "assumed: 2 FMA ports (Xeon parts with one AVX-512 FMA port reach half the 512-bit figure)"
	}
	if opts.FMAPerCycle256 > 0 {
		u256, note = opts.FMAPerCycle256, "given"
	}
	if opts.FMAPerCycle512 > 0 {
		u512, note = opts.FMAPerCycle512, "given"
	}
	return u256, u512, note
}

// runner times loops on a pool of locked OS threads, bound to their CPUs
// when pinning works. Figures are the best of many short bursts: on a
// shared or busy machine a burst that was not preempted shows what the core
// can do, where one long run would average in other processes' time slices.
type runner struct {
	cpus   []int
	dur    time.Duration // total time per figure
	burst  time.Duration // one timed run
	pinned bool
	// clockHz is the best clock sample so far (0 without a clock loop).
	clockHz float64
	work    []chan func()
	done    chan struct{}
}

// start launches one worker per CPU; stop ends them. Workers never unlock
// their threads, so the threads (with their changed affinity) exit with
// them instead of returning to the Go scheduler.
func (r *runner) start() error {
	r.done = make(chan struct{}, len(r.cpus))
	errc := make(chan error, len(r.cpus))
	r.work = make([]chan func(), len(r.cpus))
	for i, c := range r.cpus {
		r.work[i] = make(chan func())
		go func(w chan func()) {
			runtime.LockOSThread()
			var err error
			if c != -1 {
				err = pinThread(c)
			}
			errc <- err
			for f := range w {
				f()
				r.done <- struct{}{}
			}
		}(r.work[i])
	}
	r.pinned = r.cpus[0] != -1
	var first error
	for range r.cpus {
		if err := <-errc; err != nil {
			r.pinned = false
			if first == nil {
				first = err
			}
		}
	}
	if first != nil && runtime.GOOS == "linux" {
		r.stop()
		return fmt.Errorf("peak: bind a thread to one of CPUs %v: %w; give CPUs this process may use (see taskset -p)", r.cpus, first)
	}
	return nil
}

func (r *runner) stop() {
	for _, w := range r.work {
		close(w)
	}
	r.work = nil
}

// onThreads runs work(i) on the first n workers and returns the time from
// the moment all n were running to the last finish. The workers take the
// times themselves: handing work to a locked thread can wait for the OS to
// schedule it, and that wait must not count as run time. The last worker
// to arrive starts the others, which spin until then.
func (r *runner) onThreads(n int, work func(i int)) time.Duration {
	var ready atomic.Int32
	var started atomic.Bool
	var start time.Duration
	ends := make([]time.Duration, n)
	base := time.Now()
	for i := 0; i < n; i++ {
		r.work[i] <- func() {
			if ready.Add(1) == int32(n) {
				start = time.Since(base)
				started.Store(true)
			}
			for !started.Load() {
			}
			work(i)
			ends[i] = time.Since(base)
		}
	}
	for i := 0; i < n; i++ {
		<-r.done
	}
	return slices.Max(ends) - start
}

// calibrate finds how many iterations of fn take about one burst.
func (r *runner) calibrate(fn func(int)) int {
	iters := 1 << 6
	for {
		d := r.onThreads(1, func(int) { fn(iters) })
		if d >= r.burst/4 || iters >= math.MaxInt32 {
			scaled := float64(iters) * float64(r.burst) / float64(max(d, time.Microsecond))
			return max(1, int(scaled))
		}
		iters *= 2
	}
}

// rate returns the best ops/s of fn over bursts on n threads, for r.dur
// (at least three bursts). After each burst a short clock burst runs on the
// first thread, so the clock is sampled under the same conditions (boost,
// load) as the loops; r.clockHz keeps the best.
func (r *runner) rate(fn func(int), opsPerIter float64, n int) float64 {
	iters := r.calibrate(fn)
	best := 0.0
	t0 := time.Now()
	for k := 0; k < 3 || time.Since(t0) < r.dur; k++ {
		d := r.onThreads(n, func(int) { fn(iters) })
		best = math.Max(best, float64(n)*float64(iters)*opsPerIter/d.Seconds())
		r.sampleClock()
	}
	return best
}

// clockIters is one clock burst: 2000 x 100 dependent adds, ~50-100 us.
const clockIters = 2000

// sampleClock times one clock burst on the first worker.
func (r *runner) sampleClock() {
	if !clockMeasured {
		return
	}
	var cyc float64
	d := r.onThreads(1, func(int) { cyc = clockCycles(clockIters) })
	r.clockHz = math.Max(r.clockHz, clockIters*cyc/d.Seconds())
}

// frequency samples the clock for r.dur and returns the best estimate so
// far, or the OS's figure without a clock loop.
func (r *runner) frequency() (float64, string) {
	if clockMeasured {
		t0 := time.Now()
		for k := 0; k < 10 || time.Since(t0) < r.dur; k++ {
			r.sampleClock()
		}
		return r.clockHz, "measured (dependent-add loop)"
	}
	if mhz := cpuinfoMHz(); mhz > 0 {
		return mhz * 1e6, "/proc/cpuinfo (cpu MHz, max)"
	}
	if cpuid.CPU.BoostFreq > 0 {
		return float64(cpuid.CPU.BoostFreq), "cpuid (boost)"
	}
	if cpuid.CPU.Hz > 0 {
		return float64(cpuid.CPU.Hz), "cpuid (base)"
	}
	return 0, "unknown"
}

// cpuinfoMHz returns the highest "cpu MHz" in /proc/cpuinfo, 0 if none.
func cpuinfoMHz() float64 {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	best := 0.0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				best = math.Max(best, x)
			}
		}
	}
	return best
}

// memory measures streaming read and copy bandwidth. All-cores runs split
// the buffer so the threads together stream the whole of it.
func (r *runner) memory(size int64) (MemoryFigure, error) {
	if size == 0 {
		size = 8 * int64(max(cpuid.CPU.Cache.L3, 0))
		size = max(size, 256<<20)
	}
	n := len(r.cpus)
	if size < int64(n)*(1<<20) || size > 64<<30 {
		return MemoryFigure{}, fmt.Errorf("peak: memory buffer %d bytes out of range; use 1 MiB per thread .. 64 GiB", size)
	}
	buf := make([]byte, size)
	for i := range buf { // fault every page in before timing
		buf[i] = byte(i)
	}
	m := MemoryFigure{BufferBytes: size}
	chunk := func(i, parts int) []byte {
		per := len(buf) / parts &^ 127
		return buf[i*per : (i+1)*per]
	}
	read := func(parts int) float64 {
		best := 0.0
		t0 := time.Now()
		for k := 0; k < 3 || time.Since(t0) < r.dur; k++ {
			d := r.onThreads(parts, func(i int) {
				// KeepAlive makes the fold live, so the compiler cannot drop the read loop.
				runtime.KeepAlive(streamRead(chunk(i, parts)))
			})
			best = math.Max(best, float64(len(chunk(0, parts))*parts)/d.Seconds())
		}
		return best
	}
	cp := func(parts int) float64 {
		best := 0.0
		t0 := time.Now()
		for k := 0; k < 3 || time.Since(t0) < r.dur; k++ {
			d := r.onThreads(parts, func(i int) {
				c := chunk(i, parts)
				h := len(c) / 2
				copy(c[:h], c[h:])
			})
			best = math.Max(best, float64(len(chunk(0, parts))/2*2*parts)/d.Seconds())
		}
		return best
	}
	m.ReadPerCore, m.CopyPerCore = read(1), cp(1)
	m.ReadAllCores, m.CopyAllCores = read(n), cp(n)
	return m, nil
}

// streamReadGo is the portable read loop (and the assembly's tail).
func streamReadGo(p []byte) uint64 {
	var s0, s1, s2, s3 uint64
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := p[i : i+32 : i+32]
		s0 += uint64(q[0]) | uint64(q[1])<<8 | uint64(q[2])<<16 | uint64(q[3])<<24 | uint64(q[4])<<32 | uint64(q[5])<<40 | uint64(q[6])<<48 | uint64(q[7])<<56
		s1 += uint64(q[8]) | uint64(q[9])<<8 | uint64(q[10])<<16 | uint64(q[11])<<24 | uint64(q[12])<<32 | uint64(q[13])<<40 | uint64(q[14])<<48 | uint64(q[15])<<56
		s2 += uint64(q[16]) | uint64(q[17])<<8 | uint64(q[18])<<16 | uint64(q[19])<<24 | uint64(q[20])<<32 | uint64(q[21])<<40 | uint64(q[22])<<48 | uint64(q[23])<<56
		s3 += uint64(q[24]) | uint64(q[25])<<8 | uint64(q[26])<<16 | uint64(q[27])<<24 | uint64(q[28])<<32 | uint64(q[29])<<40 | uint64(q[30])<<48 | uint64(q[31])<<56
	}
	for ; i < len(p); i++ {
		s0 += uint64(p[i])
	}
	return s0 + s1 + s2 + s3
}
