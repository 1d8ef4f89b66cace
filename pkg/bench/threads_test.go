package bench

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestChooseThreads(t *testing.T) {
	clock := &SimClock{}
	cost := map[int]time.Duration{1: 300 * time.Microsecond, 2: 450 * time.Microsecond, 4: 200 * time.Microsecond}
	cur := 0
	var sets []int
	set := func(n int) error { cur = n; sets = append(sets, n); return nil }
	run := func() error { clock.Advance(cost[cur]); return nil }
	ch, err := ChooseThreads([]int{1, 2, 4}, set, run, 3, 4, clock)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Threads != 4 || cur != 4 || !ch.Decided || ch.RunnerUp != 1 {
		t.Fatalf("chose %d (current %d, decided %v, runner-up %d), want 4 over 1: %s", ch.Threads, cur, ch.Decided, ch.RunnerUp, ch.Why)
	}
	// A clear difference stops at the fewest rounds an interval needs (6), not the 3 asked.
	if ch.Rounds != minRatioRounds || ch.Stats[2].N != 4*minRatioRounds {
		t.Fatalf("rounds %d, samples per count %d; want %d and %d", ch.Rounds, ch.Stats[2].N, minRatioRounds, 4*minRatioRounds)
	}
	if math.Abs(ch.Ratio-1.5) > 1e-9 || ch.RatioLo <= 1 {
		t.Fatalf("ratio %v (%v-%v), want 1.5 above 1", ch.Ratio, ch.RatioLo, ch.RatioHi)
	}
	// Blocks interleave: 1,2,4,1,2,4,... then the final set.
	var want []int
	for r := 0; r < minRatioRounds; r++ {
		want = append(want, 1, 2, 4)
	}
	want = append(want, 4)
	if len(sets) != len(want) {
		t.Fatalf("sets %v", sets)
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("sets %v, want %v", sets, want)
		}
	}
	if _, err := ChooseThreads(nil, set, run, 1, 1, clock); err == nil {
		t.Fatal("no counts accepted")
	}
	boom := errors.New("boom")
	if _, err := ChooseThreads([]int{1}, set, func() error { return boom }, 1, 1, clock); !errors.Is(err, boom) {
		t.Fatalf("run error lost: %v", err)
	}
	if got := ThreadCandidates(2); len(got) != 2 || got[1] != 2 {
		t.Fatalf("candidates(2) = %v", got)
	}
	if got := ThreadCandidates(16); len(got) != 3 || got[1] != 8 {
		t.Fatalf("candidates(16) = %v", got)
	}
}

// noisyRun costs base[cur] scaled by a repeating pattern of factors: the per-round ratio of two
// counts then wanders around base's ratio as it does on a shared machine.
func noisyRun(clock *SimClock, base map[int]time.Duration, cur *int, factors []float64) func() error {
	i := 0
	return func() error {
		f := factors[i%len(factors)]
		i++
		clock.Advance(time.Duration(float64(base[*cur]) * f))
		return nil
	}
}

func TestChooseThreadsTieKeepsFewerThreads(t *testing.T) {
	cases := []struct {
		name    string
		two     time.Duration // 2 threads' cost; 1 thread's is 1000 us
		factors []float64     // noise, by run
		want    int
	}{
		// Equal costs, noise of +-0.3% that reaches both counts alike: the interval reaches 1
		// within the 2% band, so the single thread is kept.
		{"equal", 1000 * time.Microsecond, []float64{1, 1.003, 0.998, 1.001, 0.999, 1.002}, 1},
		// 2 threads 1% faster in every block: faster beyond doubt, however little, so 2.
		{"two slightly faster", 990 * time.Microsecond, []float64{1}, 2},
		// 1 thread 1% faster: 1.
		{"one slightly faster", 1010 * time.Microsecond, []float64{1}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := &SimClock{}
			cur := 0
			set := func(n int) error { cur = n; return nil }
			base := map[int]time.Duration{1: 1000 * time.Microsecond, 2: c.two}
			ch, err := ChooseThreads([]int{1, 2}, set, noisyRun(clock, base, &cur, c.factors), 4, 5, clock)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Threads != c.want || cur != c.want || !ch.Decided {
				t.Fatalf("chose %d (decided %v), want %d: %s", ch.Threads, ch.Decided, c.want, ch.Why)
			}
		})
	}
}

func TestChooseThreadsTooNoisy(t *testing.T) {
	clock := &SimClock{}
	cur := 0
	set := func(n int) error { cur = n; return nil }
	// Equal costs, but each block lands on a different load: +-30% by block, so the per-round
	// ratio swings both ways and never settles.
	base := map[int]time.Duration{1: time.Millisecond, 2: time.Millisecond}
	pattern := []float64{}
	for _, f := range []float64{1, 1.3, 0.7, 1.2, 0.8, 1.25, 1, 0.75, 1.3} {
		for k := 0; k < 6; k++ { // one unmeasured + 5 timed runs per block
			pattern = append(pattern, f)
		}
	}
	ch, err := ChooseThreadsWith([]int{1, 2}, set, noisyRun(clock, base, &cur, pattern), ThreadOptions{MinRounds: 4, MaxRounds: 10, Block: 5}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Decided || ch.Rounds != 10 || !strings.Contains(ch.Why, "too noisy to decide") {
		t.Fatalf("decided %v after %d rounds (%s); want undecided after 10", ch.Decided, ch.Rounds, ch.Why)
	}
	if cur != ch.Threads {
		t.Fatalf("left %d threads set, chose %d", cur, ch.Threads)
	}
}

func TestChooseThreadsMaxTime(t *testing.T) {
	clock := &SimClock{}
	cur := 0
	set := func(n int) error { cur = n; return nil }
	base := map[int]time.Duration{1: time.Millisecond, 2: time.Millisecond}
	pattern := []float64{1, 1, 1, 1, 1, 1, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7}
	ch, err := ChooseThreadsWith([]int{1, 2}, set, noisyRun(clock, base, &cur, pattern), ThreadOptions{MinRounds: 6, MaxRounds: 1000, Block: 5, MaxTime: 100 * time.Millisecond}, clock)
	if err != nil {
		t.Fatal(err)
	}
	// Each round measures 2 x 6 runs of ~1 ms: the time limit stops it near 100 ms.
	if ch.Decided || ch.Rounds > 10 {
		t.Fatalf("decided %v after %d rounds; want the time limit to stop an undecided choice", ch.Decided, ch.Rounds)
	}
}

// The load moves between rounds, and 2 threads' blocks caught it in a third of the rounds:
// pooled over all samples, 1 thread has the lower median (1.00 against 1.03 ms), while 2 threads
// were faster in the median round (0.92). The choice follows the rounds, the figure its
// interval is built on, and says it could not decide.
func TestChooseThreadsUndecidedFollowsTheRounds(t *testing.T) {
	clock := &SimClock{}
	cur := 0
	set := func(n int) error { cur = n; return nil }
	base := map[int]time.Duration{1: 1000 * time.Microsecond, 2: 920 * time.Microsecond}
	var pattern []float64
	for _, r := range [][2]float64{{0.8, 0.8 * 1.3}, {0.8, 0.8 * 1.3}, {0.8, 0.8}, {1.2, 1.2}, {1.2, 1.2}, {1.2, 1.2}} {
		for _, f := range r { // a block: one unmeasured and 5 timed runs
			for k := 0; k < 6; k++ {
				pattern = append(pattern, f)
			}
		}
	}
	ch, err := ChooseThreadsWith([]int{1, 2}, set, noisyRun(clock, base, &cur, pattern), ThreadOptions{MinRounds: 6, MaxRounds: 12, Block: 5}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if p1, p2 := ch.Stats[1].P50, ch.Stats[2].P50; p1 >= p2 {
		t.Fatalf("pooled p50 1 thread %v, 2 threads %v: the case needs 1 thread lower", p1, p2)
	}
	if ch.Decided || ch.Threads != 2 || cur != 2 || ch.RunnerUp != 1 {
		t.Fatalf("chose %d (current %d, decided %v): %s; want 2, undecided", ch.Threads, cur, ch.Decided, ch.Why)
	}
	if math.Abs(ch.Ratio-1/0.92) > 1e-6 || ch.RatioLo >= 1 || ch.RatioHi <= 1 {
		t.Fatalf("1/2 ratio %v (%v-%v), want 1/0.92 with an interval across 1", ch.Ratio, ch.RatioLo, ch.RatioHi)
	}
	if !strings.Contains(ch.Why, "too noisy to decide after 12 rounds") || !strings.Contains(ch.Why, "kept 2, faster in the median round") {
		t.Fatalf("why: %s", ch.Why)
	}
}

// SeparatedRounds ends a choice early only where the counts' runs do not overlap at all: 8x
// apart with +-30% noise after 2 rounds; a 5% difference under that noise, or runs that overlap
// once, go on to the usual rounds.
func TestChooseThreadsSeparated(t *testing.T) {
	noise := []float64{1, 1.3, 0.7, 1.1, 0.9, 1.2}
	cases := []struct {
		name       string
		one, two   time.Duration
		factors    []float64
		wantRounds int
		want       int
	}{
		{"8x apart", 500 * time.Microsecond, 4 * time.Millisecond, noise, 2, 1},
		{"2 threads 3x faster", 3 * time.Millisecond, time.Millisecond, noise, 2, 2},
		{"5% apart, overlapping", time.Millisecond, 1050 * time.Microsecond, noise, 6, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := &SimClock{}
			cur := 0
			set := func(n int) error { cur = n; return nil }
			base := map[int]time.Duration{1: c.one, 2: c.two}
			ch, err := ChooseThreadsWith([]int{1, 2}, set, noisyRun(clock, base, &cur, c.factors), ThreadOptions{MinRounds: 6, Block: 5, SeparatedRounds: 2}, clock)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Rounds != c.wantRounds || ch.Threads != c.want || cur != c.want {
				t.Fatalf("chose %d after %d rounds (%s), want %d after %d", ch.Threads, ch.Rounds, ch.Why, c.want, c.wantRounds)
			}
			if ch.Rounds < 6 && !strings.Contains(ch.Why, "every run at") {
				t.Errorf("an early end does not say why: %s", ch.Why)
			}
		})
	}
	if got := separated([]int{1, 2}, map[int][]time.Duration{1: {1, 3}, 2: {3, 5}}); got != -1 {
		t.Errorf("runs that tie at the edge counted as apart (%d)", got)
	}
	if got := separated([]int{1, 2, 4}, map[int][]time.Duration{1: {5, 6}, 2: {1, 3}, 4: {2, 9}}); got != -1 {
		t.Errorf("apart from one count but not the other counted as apart (%d)", got)
	}
	if got := separated([]int{1, 2, 4}, map[int][]time.Duration{1: {5, 6}, 2: {1, 2}, 4: {3, 4}}); got != 2 {
		t.Errorf("2 apart from both others: got %d", got)
	}
}
