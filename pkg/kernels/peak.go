package kernels

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/cpuid/v2"
)

// PeakOptions configures MeasurePeak. The zero value measures on every CPU
// this process may use, ~200 ms per figure, best of 3.
type PeakOptions struct {
	// CPUs are the logical CPUs for the all-cores figures: one goroutine per
	// entry, each on its own locked OS thread bound to that CPU (Linux).
	// Empty means every CPU in the process's affinity mask. The per-core
	// figures run on CPUs[0].
	CPUs []int
	// Duration is the target time of one timed run (default 200 ms).
	Duration time.Duration
	// Repeats is how many timed runs each figure takes; the best is kept,
	// since interference only ever slows a run down (default 3).
	Repeats int
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
	// BestFP32 and BestINT8 are the highest all-cores rates above (FLOP/s,
	// OP/s): the compute roofs.
	BestFP32 float64 `json:"best_fp32_flops"`
	BestINT8 float64 `json:"best_int8_ops"`
	// Duration and Repeats are the settings used.
	Duration time.Duration `json:"duration_ns"`
	Repeats  int           `json:"repeats"`
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
// bandwidth. It takes about (number of figures) x Repeats x Duration x 2.
func MeasurePeak(opts PeakOptions) (PeakResult, error) {
	if opts.Duration == 0 {
		opts.Duration = 200 * time.Millisecond
	}
	if opts.Duration < time.Millisecond || opts.Duration > time.Minute {
		return PeakResult{}, fmt.Errorf("peak: duration %v out of range; use 1ms..1m", opts.Duration)
	}
	if opts.Repeats == 0 {
		opts.Repeats = 3
	}
	if opts.Repeats < 1 || opts.Repeats > 100 {
		return PeakResult{}, fmt.Errorf("peak: repeats %d out of range; use 1..100", opts.Repeats)
	}
	if opts.FMAPerCycle256 < 0 || opts.FMAPerCycle512 < 0 {
		return PeakResult{}, errors.New("peak: FMA units per cycle must not be negative")
	}
	cpus := opts.CPUs
	if len(cpus) == 0 {
		cpus = allowedCPUs()
	}
	if len(cpus) == 0 {
		cpus = make([]int, runtime.NumCPU())
		for i := range cpus {
			cpus[i] = -1 // unknown ids: lock threads but do not bind
		}
	}
	seen := map[int]bool{}
	for _, c := range cpus {
		if c != -1 && (c < 0 || seen[c]) {
			return PeakResult{}, fmt.Errorf("peak: CPU list %v: %d is negative or repeated; give distinct CPU ids", opts.CPUs, c)
		}
		seen[c] = true
	}

	res := PeakResult{
		CPUModel: cpuid.CPU.BrandName,
		Features: detected,
		CPUs:     cpus,
		Duration: opts.Duration,
		Repeats:  opts.Repeats,
	}
	r := runner{cpus: cpus, dur: opts.Duration, repeats: opts.Repeats}
	if err := r.pinCheck(); err != nil {
		return res, err
	}
	res.Pinned = r.pinned

	res.FrequencyHz, res.FrequencySource = r.frequency()
	u256, u512, unitNote := fmaUnits(opts)

	for _, l := range peakLoops() {
		if !detected.supports(l.path) {
			continue
		}
		f := ComputeFigure{ISA: l.name, Path: l.path}
		f.PerCore = r.rate(l.fn, l.opsPerIter, 1)
		f.AllCores = r.rate(l.fn, l.opsPerIter, len(cpus))
		units, width := u256, 256
		if l.path == AVX512 || l.path == AVX512VNNI {
			units, width = u512, 512
		}
		if l.macsPerInstr > 0 && units > 0 && res.FrequencyHz > 0 {
			f.TheoreticalPerCore = units * l.macsPerInstr * 2 * res.FrequencyHz
			f.TheoreticalAllCores = f.TheoreticalPerCore * float64(len(cpus))
			f.Assumption = fmt.Sprintf("%g %d-bit units x %g multiply-adds per instruction x 2 x %.3f GHz (%s; %s)",
				units, width, l.macsPerInstr, res.FrequencyHz/1e9, unitNote, res.FrequencySource)
		}
		if l.kind == "fp32" {
			res.FP32 = append(res.FP32, f)
			res.BestFP32 = math.Max(res.BestFP32, f.AllCores)
		} else {
			res.INT8 = append(res.INT8, f)
			res.BestINT8 = math.Max(res.BestINT8, f.AllCores)
		}
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

// runner times loops on locked, pinned OS threads.
type runner struct {
	cpus    []int
	dur     time.Duration
	repeats int
	pinned  bool
}

// pinCheck finds out whether binding works, so one bad CPU id is an
// error up front rather than a silent unpinned figure.
func (r *runner) pinCheck() error {
	if r.cpus[0] == -1 {
		return nil
	}
	errc := make(chan error, len(r.cpus))
	var wg sync.WaitGroup
	for _, c := range r.cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			// The thread exits with the goroutine (no UnlockOSThread), so
			// its changed affinity never leaks to other goroutines.
			errc <- pinThread(c)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			if runtime.GOOS != "linux" {
				return nil // locked but unbound; Pinned stays false
			}
			return fmt.Errorf("peak: bind a thread to one of CPUs %v: %w; give CPUs this process may use (see taskset -p)", r.cpus, err)
		}
	}
	r.pinned = true
	return nil
}

// onThreads runs work(i) on n locked threads bound to cpus[i], all started
// together, and returns the wall time from the start to the last finish.
func (r *runner) onThreads(n int, work func(i int)) time.Duration {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			runtime.LockOSThread() // not unlocked: the thread dies with the goroutine
			if r.pinned {
				_ = pinThread(r.cpus[i]) // checked by pinCheck
			}
			ready.Done()
			<-start
			work(i)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	return time.Since(t0)
}

// calibrate finds how many iterations of fn take about r.dur on one core.
func (r *runner) calibrate(fn func(int)) int {
	iters := 1 << 10
	for {
		d := r.onThreads(1, func(int) { fn(iters) })
		if d >= r.dur/8 || iters >= 1<<40 {
			scaled := float64(iters) * float64(r.dur) / float64(max(d, time.Microsecond))
			return max(1, int(scaled))
		}
		iters *= 4
	}
}

// rate returns the best ops/s of fn on n threads (each running the
// calibrated iteration count).
func (r *runner) rate(fn func(int), opsPerIter float64, n int) float64 {
	iters := r.calibrate(fn)
	best := 0.0
	for k := 0; k < r.repeats; k++ {
		d := r.onThreads(n, func(int) { fn(iters) })
		best = math.Max(best, float64(n)*float64(iters)*opsPerIter/d.Seconds())
	}
	return best
}

func (r *runner) frequency() (float64, string) {
	if clockMeasured {
		cyc := 0.0
		hz := r.rate(func(it int) { cyc = clockCycles(it) }, 1, 1)
		return hz * cyc, "measured (dependent-add loop)"
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

var sinkU64 uint64

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
		for k := 0; k < r.repeats; k++ {
			var mu sync.Mutex
			d := r.onThreads(parts, func(i int) {
				s := streamRead(chunk(i, parts))
				mu.Lock()
				sinkU64 += s
				mu.Unlock()
			})
			best = math.Max(best, float64(len(chunk(0, parts))*parts)/d.Seconds())
		}
		return best
	}
	cp := func(parts int) float64 {
		best := 0.0
		for k := 0; k < r.repeats; k++ {
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
