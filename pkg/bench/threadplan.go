package bench

import "fmt"

// ThreadPlan is what decides a benchmark's intra-op thread count, in order: a count the user
// chose (flag or config), the count an artifact was tuned for (its manifest), a measurement
// (Measure, for one stream when nothing else chose), and for several streams the CPUs shared
// among them.
type ThreadPlan struct {
	// Chosen is the user's count; 0: not chosen.
	Chosen int
	// Manifest is the count an artifact's manifest records (already bounded by the CPUs);
	// 0: none. ManifestOf names the artifact.
	Manifest   int
	ManifestOf string
	// Default is libtorch's count, the most Measure tries.
	Default int
	// Streams run at once; AvailableCPUs is how many CPUs they share.
	Streams, AvailableCPUs int
	// Measure times the given counts and returns the fastest; nil: do not measure (a sweep,
	// libtorch's own runtime settings).
	Measure func(counts []int) (ThreadChoice, error)
}

// Resolve returns the thread count to run with (0: libtorch's default) and why, for the log.
func (p ThreadPlan) Resolve() (int, string, error) {
	switch {
	case p.Chosen > 0:
		return p.Chosen, "", nil
	case p.Manifest > 0:
		return p.Manifest, fmt.Sprintf("%d threads, as the artifact %s was tuned for (--threads overrides)", p.Manifest, p.ManifestOf), nil
	case p.Streams > 1:
		return max(1, p.AvailableCPUs/p.Streams), "", nil
	case p.Measure != nil:
		// A fixed rule loses somewhere (a small transformer is faster on 1 thread than 2 here).
		counts := ThreadCandidates(p.Default)
		if len(counts) <= 1 {
			return p.Default, "", nil
		}
		ch, err := p.Measure(counts)
		if err != nil {
			return 0, "", err
		}
		return ch.Threads, fmt.Sprintf("%d threads, measured fastest (%s; --threads overrides)", ch.Threads, ch.Why), nil
	}
	return 0, "", nil
}
