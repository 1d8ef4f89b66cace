package validate

import (
	"fmt"
	"math"
)

// Diff is the comparison of a candidate's values with the reference's, element by element:
// the sums a cosine similarity needs and the absolute errors. NaN and infinities are compared
// explicitly: the same non-finite value at the same place on both sides agrees (and is left out
// of the sums); any other pairing with a non-finite value is an infinite difference, and the
// cosine of a Diff that holds one is 0. Never a silent 0 or a NaN that compares false against
// every threshold.
type Diff struct {
	dot, refSq, gotSq float64 // over the finite pairs
	sumAbs, maxAbs    float64 // |got - ref|
	refMax            float64 // largest finite |ref|
	n                 int64   // elements compared
	mismatch          bool    // a non-finite value met a different value
}

// DiffOf compares got with ref, which have the same length.
func DiffOf[T float32 | float64](ref, got []T) Diff {
	var d Diff
	for j := range ref {
		a, b := float64(ref[j]), float64(got[j])
		if !finite(a) || !finite(b) {
			same := (math.IsNaN(a) && math.IsNaN(b)) || (math.IsInf(a, 0) && a == b)
			if !same {
				d.mismatch = true
				d.maxAbs = math.Inf(1)
				d.sumAbs = math.Inf(1)
			}
			if finite(a) {
				d.refMax = max(d.refMax, math.Abs(a))
			}
			continue
		}
		e := math.Abs(a - b)
		d.maxAbs = max(d.maxAbs, e)
		d.sumAbs += e
		d.refMax = max(d.refMax, math.Abs(a))
		d.dot += a * b
		d.refSq += a * a
		d.gotSq += b * b
	}
	d.n = int64(len(ref))
	return d
}

// Merge adds o's elements to d (an output over many samples from its per-sample Diffs).
func (d *Diff) Merge(o Diff) {
	d.dot += o.dot
	d.refSq += o.refSq
	d.gotSq += o.gotSq
	d.sumAbs += o.sumAbs
	d.maxAbs = max(d.maxAbs, o.maxAbs)
	d.refMax = max(d.refMax, o.refMax)
	d.n += o.n
	d.mismatch = d.mismatch || o.mismatch
}

// Cosine is the cosine similarity. Two all-zero vectors are identical (1); one all-zero vector
// against another is 0, as is a non-finite value against a different value.
func (d Diff) Cosine() float64 {
	if d.mismatch {
		return 0
	}
	if d.refSq == 0 && d.gotSq == 0 {
		return 1
	}
	if d.refSq == 0 || d.gotSq == 0 {
		return 0
	}
	c := d.dot / (math.Sqrt(d.refSq) * math.Sqrt(d.gotSq))
	if math.IsNaN(c) {
		return 0
	}
	return min(1, max(-1, c))
}

// MaxAbs is the largest |candidate - reference| (+Inf when a non-finite value met another).
func (d Diff) MaxAbs() float64 { return d.maxAbs }

// MeanAbs is the mean |candidate - reference| over every element compared.
func (d Diff) MeanAbs() float64 { return d.sumAbs / math.Max(1, float64(d.n)) }

// RefMaxAbs is the largest finite |reference|, to judge the errors' scale.
func (d Diff) RefMaxAbs() float64 { return d.refMax }

// CompareOutputs is the largest absolute difference and the smallest per-output cosine
// similarity between two lists of outputs, each flattened (the same outputs, in the same
// order), with Diff's treatment of NaN and infinities.
func CompareOutputs(ref, got [][]float64) (maxAbs, minCos float64, err error) {
	if len(ref) != len(got) {
		return 0, 0, fmt.Errorf("%d outputs, the original gives %d", len(got), len(ref))
	}
	minCos = 1
	for i := range ref {
		if len(ref[i]) != len(got[i]) {
			return 0, 0, fmt.Errorf("output %d has %d elements, the original's has %d", i, len(got[i]), len(ref[i]))
		}
		d := DiffOf(ref[i], got[i])
		maxAbs = max(maxAbs, d.MaxAbs())
		minCos = min(minCos, d.Cosine())
	}
	return maxAbs, minCos, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
