package bench

import (
	"errors"
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
	if ch.Threads != 4 || cur != 4 {
		t.Fatalf("chose %d (current %d), want 4: %s", ch.Threads, cur, ch.Why)
	}
	if ch.Stats[2].N != 12 {
		t.Fatalf("samples per count: %d, want 12", ch.Stats[2].N)
	}
	// Blocks interleave: 1,2,4,1,2,4,... then the final set.
	want := []int{1, 2, 4, 1, 2, 4, 1, 2, 4, 4}
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
