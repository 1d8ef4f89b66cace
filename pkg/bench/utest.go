package bench

import (
	"fmt"
	"math"
	"slices"
)

// UTestResult is the outcome of a two-sided Mann-Whitney U test.
type UTestResult struct {
	N1 int `json:"n1"`
	N2 int `json:"n2"`
	// U1 is the U statistic of the first sample: the number of pairs
	// (x, y) with x > y, ties counting one half.
	U1 float64 `json:"u1"`
	// P is the two-sided p-value.
	P float64 `json:"p"`
	// Method is "exact" or "asymptotic".
	Method string `json:"method"`
}

// exactUTestMaxWork bounds the exact path's cost (about N2 * N1^2 * N2 steps)
// so a small sample against a huge one falls back to the normal
// approximation, which is accurate there.
const exactUTestMaxWork = 2e8

// MannWhitneyU runs the two-sided Mann-Whitney U test of x against y. As
// scipy.stats.mannwhitneyu(method="auto"): the exact null distribution when
// one sample has at most 8 values and no value is tied, otherwise the normal
// approximation with tie correction and continuity correction. Inputs are
// not modified.
func MannWhitneyU(x, y []float64) (UTestResult, error) {
	n1, n2 := len(x), len(y)
	if n1 == 0 || n2 == 0 {
		return UTestResult{}, fmt.Errorf("u test: need at least one value in each sample (have %d and %d)", n1, n2)
	}
	for _, s := range [][]float64{x, y} {
		for _, v := range s {
			if math.IsNaN(v) {
				return UTestResult{}, fmt.Errorf("u test: sample holds NaN")
			}
		}
	}
	type obs struct {
		v     float64
		first bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range x {
		all = append(all, obs{v, true})
	}
	for _, v := range y {
		all = append(all, obs{v, false})
	}
	slices.SortFunc(all, func(a, b obs) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	// Average ranks over tie groups; collect sum(t^3 - t) for the variance.
	var r1, tieSum float64
	ties := false
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		t := float64(j - i)
		if t > 1 {
			ties = true
			tieSum += t*t*t - t
		}
		rank := float64(i+1+j) / 2 // mean of ranks i+1 .. j
		for k := i; k < j; k++ {
			if all[k].first {
				r1 += rank
			}
		}
		i = j
	}
	fn1, fn2 := float64(n1), float64(n2)
	u1 := r1 - fn1*(fn1+1)/2
	u := math.Max(u1, fn1*fn2-u1)
	res := UTestResult{N1: n1, N2: n2, U1: u1}

	small, large := min(n1, n2), max(n1, n2)
	if !ties && small <= 8 && float64(large)*float64(small)*float64(small)*float64(large) <= exactUTestMaxWork {
		res.Method = "exact"
		res.P = math.Min(1, 2*uSurvival(int(math.Round(u)), small, large))
		return res, nil
	}
	res.Method = "asymptotic"
	n := fn1 + fn2
	sigma := math.Sqrt(fn1 * fn2 / 12 * ((n + 1) - tieSum/(n*(n-1))))
	if sigma == 0 || math.IsNaN(sigma) {
		// Every value equal: no evidence of any difference.
		res.P = 1
		return res, nil
	}
	z := (u - fn1*fn2/2 - 0.5) / sigma
	res.P = math.Min(1, math.Erfc(z/math.Sqrt2)) // 2 * normal survival of z
	return res, nil
}

// uSurvival returns P(U >= u) under the null hypothesis for samples of size
// m and n (no ties). It counts arrangements with the recurrence
// N(u; m, n) = N(u-n; m-1, n) + N(u; m, n-1) (is the largest value from
// the first sample or the second?), keeping one layer of n at a time.
func uSurvival(u, m, n int) float64 {
	if u <= 0 {
		return 1
	}
	maxU := m * n
	if u > maxU {
		return 0
	}
	// prev[i] holds N(.; i, nn-1), cur[i] holds N(.; i, nn).
	prev := make([][]float64, m+1)
	cur := make([][]float64, m+1)
	for i := range prev {
		prev[i] = make([]float64, maxU+1)
		cur[i] = make([]float64, maxU+1)
	}
	// nn = 0: only U = 0 is possible for every i.
	for i := 0; i <= m; i++ {
		prev[i][0] = 1
	}
	for nn := 1; nn <= n; nn++ {
		clear(cur[0])
		cur[0][0] = 1
		for i := 1; i <= m; i++ {
			c, p, left := cur[i], prev[i], cur[i-1]
			top := i * nn
			for v := 0; v <= top; v++ {
				s := p[v]
				if v >= nn {
					s += left[v-nn]
				}
				c[v] = s
			}
			clear(c[top+1:])
		}
		prev, cur = cur, prev
	}
	dist := prev[m]
	var total, tail float64
	for v, c := range dist {
		total += c
		if v >= u {
			tail += c
		}
	}
	return tail / total
}
