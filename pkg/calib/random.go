package calib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// loadRandom handles Kind "random": synthetic samples from a seeded generator, so runs
// are reproducible. The data set is marked synthetic; reports must say that figures
// measured on it do not verify accuracy.
func (ld *loader) loadRandom() (*loaded, error) {
	o := ld.src.Random
	n := ld.src.Limit
	if n == 0 {
		n = DefaultRandomSamples
	}
	for name := range o.PerInput {
		if !slices.ContainsFunc(ld.ins, func(in input) bool { return in.name == name }) {
			return nil, fmt.Errorf("calib: random.per_input names %q, which is not a model input (inputs: %s)", name, inputNames(ld.ins))
		}
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x7f4a7c15)) // fixed stream: same seed, same data
	l := &loaded{synthetic: true, names: make([]string, n)}
	for i := range l.names {
		l.names[i] = fmt.Sprintf("random[%d]", i)
	}
	var descs []string
	for _, in := range ld.ins {
		r := RandomRange{o.Dist, o.Low, o.High}
		key := "random."
		if pr, ok := o.PerInput[in.name]; ok {
			r, key = pr, "random.per_input."+in.name+"."
		}
		uniform := strings.EqualFold(r.Dist, "uniform")
		for _, d := range in.sample {
			if d < 0 {
				return nil, fmt.Errorf("calib: %s has shape %s with an open size; random data need every size but the batch: give the input's full shape in the config", in.label(), in.expect())
			}
		}
		isInt := in.dtype != npy.Float32 && in.dtype != npy.Float64 && in.dtype != npy.Bool
		if isInt && r.High <= r.Low {
			return nil, fmt.Errorf("calib: %s is %s: random data for it need %slow and %shigh (values drawn from [low, high), e.g. high = the vocabulary size for token ids; per input under random.per_input)", in.label(), in.dtype, key, key)
		}
		sn := numelOf(in.sample)
		if err := ld.reserve(int64(n)*sn*int64(npy.ItemSize(in.dtype)), "random data"); err != nil {
			return nil, err
		}
		total := int(int64(n) * sn)
		data := npy.MakeData(in.dtype, total)
		lo, hi := r.Low, r.High
		if !isInt && hi <= lo {
			lo, hi = 0, 1
		}
		float := func() float64 {
			if uniform {
				return lo + (hi-lo)*rng.Float64()
			}
			return rng.NormFloat64()
		}
		switch d := data.(type) {
		case []float32:
			for i := range d {
				d[i] = float32(float())
			}
		case []float64:
			for i := range d {
				d[i] = float()
			}
		case []bool:
			for i := range d {
				d[i] = rng.IntN(2) == 1
			}
		default:
			ilo, ihi := int64(math.Ceil(lo)), int64(math.Ceil(hi)) // integers in [lo, hi)
			if ihi <= ilo {
				return nil, fmt.Errorf("calib: %slow %v and %shigh %v leave no integer for %s", key, lo, key, hi, in.label())
			}
			if err := fitsDType(in.dtype, ilo, ihi-1); err != nil {
				return nil, fmt.Errorf("calib: %s: %v; fix %slow/high", in.label(), err, key)
			}
			span := uint64(ihi - ilo)
			for i := range total {
				setInt(d, i, ilo+int64(rng.Uint64N(span)))
			}
		}
		l.cols = append(l.cols, &npy.Array{Shape: append([]int64{int64(n)}, in.sample...), DType: in.dtype, Data: data})
		switch {
		case in.dtype == npy.Bool:
			descs = append(descs, in.name+": bernoulli(0.5)")
		case isInt:
			descs = append(descs, fmt.Sprintf("%s: integers in [%g, %g)", in.name, lo, hi))
		case uniform:
			descs = append(descs, fmt.Sprintf("%s: uniform[%g, %g)", in.name, lo, hi))
		default:
			descs = append(descs, in.name+": normal(0, 1)")
		}
	}
	l.desc = fmt.Sprintf("random data, seed %d (%s)", o.Seed, strings.Join(descs, "; "))
	return l, nil
}

func fitsDType(dtype string, lo, hi int64) error {
	var mn, mx int64
	switch dtype {
	case npy.Int64:
		return nil
	case npy.Int32:
		mn, mx = math.MinInt32, math.MaxInt32
	case npy.Int16:
		mn, mx = math.MinInt16, math.MaxInt16
	case npy.Int8:
		mn, mx = math.MinInt8, math.MaxInt8
	case npy.Uint8:
		mn, mx = 0, math.MaxUint8
	}
	if lo < mn || hi > mx {
		return fmt.Errorf("random range [%d, %d] does not fit %s", lo, hi, dtype)
	}
	return nil
}

func setInt(data any, i int, v int64) {
	switch d := data.(type) {
	case []int64:
		d[i] = v
	case []int32:
		d[i] = int32(v)
	case []int16:
		d[i] = int16(v)
	case []int8:
		d[i] = int8(v)
	case []uint8:
		d[i] = uint8(v)
	}
}
