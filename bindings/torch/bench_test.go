package torch_test

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/internal/fixtures/streamref"
	"golang.org/x/sys/unix"
)

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// BenchmarkForwardOverhead measures forward three ways, interleaved in rounds in one process:
// Forward from an ordinary goroutine (the hop to the locked inference thread plus the bindings'
// call), ForwardOnThisThread in a loop already on that thread (the bindings' call alone) and the
// plain C++ loop of TimeForward (no Go per call). It reports each median and the two costs Go
// adds: hop-us (Forward minus the locked loop) and call-us (the locked loop minus C++).
func BenchmarkForwardOverhead(b *testing.B) {
	for _, name := range []string{"resnet18", "digits"} {
		b.Run(name, func(b *testing.B) {
			f := fixtures.Load(b).Get(b, name)
			m := loadFixture(b, f)
			in := tensorsOf(b, f.InputArrays(b))
			if _, err := m.TimeForward(5, in...); err != nil { // warm-up, profiling runs
				b.Fatal(err)
			}
			const round = 10
			var goNs, lockedNs, cNs []float64
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				for i := 0; i < round; i++ {
					goNs = append(goNs, timedForward(b, m, in))
				}
				var err error
				torch.Do(func() {
					for i := 0; i < round && err == nil; i++ {
						t0 := time.Now()
						var outs []torch.Output
						outs, err = m.ForwardOnThisThread(in...)
						el := time.Since(t0)
						torch.CloseOutputs(outs)
						lockedNs = append(lockedNs, float64(el.Nanoseconds()))
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				ns, err := m.TimeForward(round, in...)
				if err != nil {
					b.Fatal(err)
				}
				for _, v := range ns {
					cNs = append(cNs, float64(v))
				}
			}
			gm, lm, cm := median(goNs), median(lockedNs), median(cNs)
			b.ReportMetric(gm/1e3, "go-p50-us")
			b.ReportMetric(lm/1e3, "locked-p50-us")
			b.ReportMetric(cm/1e3, "cpp-p50-us")
			b.ReportMetric(100*(gm-cm)/cm, "overhead-%")
			b.ReportMetric((gm-lm)/1e3, "hop-us")
			b.ReportMetric((lm-cm)/1e3, "call-us")
		})
	}
}

func rssBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skip("no /proc/self/statm")
	}
	fields := strings.Fields(string(data))
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// BenchmarkSoak runs 20,000 forwards of a small model (inputs and outputs made and freed each
// time, as a server would) and fails if resident memory grows by 20 MB or more.
func BenchmarkSoak(b *testing.B) {
	f := fixtures.Load(b).Get(b, "digits")
	m := loadFixture(b, f)
	arrays := f.InputArrays(b)
	const n = 20000
	warm := func(k int) {
		for i := 0; i < k; i++ {
			x, err := torch.NewTensorAny(arrays[0].Data, arrays[0].Shape)
			if err != nil {
				b.Fatal(err)
			}
			outs, err := m.Forward(x)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := outs[0].Tensor.Float32s(); err != nil {
				b.Fatal(err)
			}
			torch.CloseOutputs(outs)
			x.Close()
		}
	}
	for i := 0; i < b.N; i++ {
		warm(500)
		before := rssBytes(b)
		warm(n)
		growth := rssBytes(b) - before
		b.ReportMetric(float64(growth)/(1<<20), "rss-growth-MB")
		if growth >= 20<<20 {
			b.Fatalf("resident memory grew %.1f MB over %d forwards", float64(growth)/(1<<20), n)
		}
	}
}

// BenchmarkForwardLoopTail calls Forward back to back from an ordinary goroutine, as a batch
// loop or a stream does, with the caller's periodic yield to Go's scheduler on and off
// (yieldIfDue), in blocks of at least 60 ms taking turns in shuffled rounds. It reports each
// side's p50, p95/p50 and involuntary context switches of the process per 1000 calls; without
// the yield, Go's sysmon preempts the inference thread once the caller's time slice is 10 ms
// old. Cases: TORCHSPEED_TAIL_CASES (model:threads, comma-separated; default below).
func BenchmarkForwardLoopTail(b *testing.B) {
	cases := os.Getenv("TORCHSPEED_TAIL_CASES")
	if cases == "" {
		cases = "transformer_traced:1,digits:1,resnet18:2"
	}
	for _, c := range strings.Split(cases, ",") {
		name, th, _ := strings.Cut(strings.TrimSpace(c), ":")
		threads, err := strconv.Atoi(th)
		if err != nil || threads < 1 {
			b.Fatalf("TORCHSPEED_TAIL_CASES: %q: want model:threads", c)
		}
		if threads > torch.AvailableCPUs() {
			continue
		}
		b.Run(name+"/threads="+th, func(b *testing.B) { benchLoopTail(b, name, threads) })
	}
}

func benchLoopTail(b *testing.B, name string, threads int) {
	f := fixtures.Load(b).Get(b, name)
	m := loadFixture(b, f)
	in := tensorsOf(b, f.InputArrays(b))
	if err := torch.SetNumThreads(threads); err != nil {
		b.Fatal(err)
	}
	defer torch.SetYield(true)
	for i := 0; i < 20; i++ { // profiling runs
		outs, err := m.Forward(in...)
		if err != nil {
			b.Fatal(err)
		}
		torch.CloseOutputs(outs)
	}
	type side struct {
		ns    []float64
		invcs int64
	}
	sides := map[bool]*side{true: {}, false: {}}
	order := []bool{true, false}
	rng := rand.New(rand.NewPCG(7, uint64(threads)))
	const block = 60 * time.Millisecond
	b.ResetTimer()
	for done := 0; done < b.N; {
		rng.Shuffle(2, func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, on := range order {
			torch.SetYield(on)
			s := sides[on]
			cs0 := involuntarySwitches(b)
			start := time.Now()
			for time.Since(start) < block {
				s.ns = append(s.ns, timedForward(b, m, in))
				done++
			}
			s.invcs += involuntarySwitches(b) - cs0
		}
	}
	b.StopTimer()
	for _, on := range []bool{true, false} {
		s, tag := sides[on], map[bool]string{true: "yield", false: "noyield"}[on]
		p50 := median(s.ns)
		b.ReportMetric(p50/1e3, tag+"-p50-us")
		b.ReportMetric(quantile(s.ns, 0.95)/p50, tag+"-p95/p50")
		b.ReportMetric(1000*float64(s.invcs)/float64(len(s.ns)), tag+"-invcs/1k")
	}
}

// timedForward runs m.Forward once from the calling goroutine and returns its time in ns.
func timedForward(b *testing.B, m *torch.Module, in []*torch.Tensor) float64 {
	t0 := time.Now()
	outs, err := m.Forward(in...)
	el := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	torch.CloseOutputs(outs)
	return float64(el.Nanoseconds())
}

// involuntarySwitches is the process's count of involuntary context switches (all threads).
func involuntarySwitches(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Nivcsw
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkCallStateful times a call with values other than tensors (Silero VAD v5 on one chunk
// of real speech and the sample rate, its state carried in attributes) two ways, interleaved:
// Call at one intra-op thread, which runs on the caller's thread, and the same call handed to
// the shared inference thread (what Call did at every thread count). hop-us is the difference.
func BenchmarkCallStateful(b *testing.B) {
	f := fixtures.Load(b).Get(b, "silero_v5")
	m := loadFixture(b, f)
	r := streamref.Load(b, f, f.Streams[0].Method)
	const round = 10
	var direct, handed []float64
	call := func(i int, viaShared bool) float64 {
		var out *torch.Value
		var err error
		t0 := time.Now()
		if viaShared {
			torch.Do(func() { out, err = m.CallOnThisThread(r.Stream.Method, r.Args(i)...) })
		} else {
			out, err = m.Call(r.Stream.Method, r.Args(i)...)
		}
		el := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		out.Close()
		return float64(el.Nanoseconds())
	}
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done += 2 * round {
		viaSharedFirst := done/(2*round)%2 == 1
		for pass := 0; pass < 2; pass++ {
			viaShared := (pass == 0) == viaSharedFirst
			for k := 0; k < round; k, i = k+1, (i+1)%r.Calls() {
				if viaShared {
					handed = append(handed, call(i, true))
				} else {
					direct = append(direct, call(i, false))
				}
			}
		}
	}
	dm, hm := median(direct), median(handed)
	b.ReportMetric(dm/1e3, "caller-thread-p50-us")
	b.ReportMetric(hm/1e3, "shared-thread-p50-us")
	b.ReportMetric((hm-dm)/1e3, "hop-us")
}
