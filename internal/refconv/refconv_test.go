package refconv

import (
	"slices"
	"testing"
)

// TestConv2d checks sums worked out by hand: padding, stride, dilation, bias, relu and groups.
func TestConv2d(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9} // [1, 1, 3, 3]
	ones := []float32{1, 1, 1, 1}             // [1, 1, 2, 2]
	for _, c := range []struct {
		what   string
		x, w   []float32
		b      []float32
		s      Shape
		relu   bool
		want   []float64
		oh, ow int
	}{
		{"2x2 of ones", x, ones, nil, Shape{N: 1, C: 1, H: 3, W: 3, OC: 1, KH: 2, KW: 2, Stride: [2]int{1, 1}, Dilation: [2]int{1, 1}}, false,
			[]float64{12, 16, 24, 28}, 2, 2},
		{"padding 1, stride 2", x, ones, nil, Shape{N: 1, C: 1, H: 3, W: 3, OC: 1, KH: 2, KW: 2, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}}, false,
			[]float64{1, 5, 11, 28}, 2, 2},
		{"dilation 2", x, ones, nil, Shape{N: 1, C: 1, H: 3, W: 3, OC: 1, KH: 2, KW: 2, Stride: [2]int{1, 1}, Dilation: [2]int{2, 2}}, false,
			[]float64{20}, 1, 1},
		{"bias -13, relu", x, ones, []float32{-13}, Shape{N: 1, C: 1, H: 3, W: 3, OC: 1, KH: 2, KW: 2, Stride: [2]int{1, 1}, Dilation: [2]int{1, 1}}, true,
			[]float64{0, 3, 11, 15}, 2, 2},
		// Two channels [x, 10x], two groups of one: output 0 sees channel 0 only, output 1 channel 1.
		{"groups 2", append(slices.Clone(x), 10, 20, 30, 40, 50, 60, 70, 80, 90), []float32{1, 1}, nil,
			Shape{N: 1, C: 2, H: 3, W: 3, OC: 2, KH: 1, KW: 1, Stride: [2]int{3, 3}, Dilation: [2]int{1, 1}, Groups: 2}, false,
			[]float64{1, 10}, 1, 1},
	} {
		if oh, ow := c.s.Out(); oh != c.oh || ow != c.ow {
			t.Errorf("%s: output %dx%d, want %dx%d", c.what, oh, ow, c.oh, c.ow)
		}
		if got := Conv2d(c.x, c.w, c.b, c.s, c.relu); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}
