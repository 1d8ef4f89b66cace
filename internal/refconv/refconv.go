// Package refconv is a 2-D convolution in float64, straight from the definition: the reference
// that torchspeed's convolution kernel and libtorch's own are checked against (Debian's
// libtorch 2.6 computes some FP32 convolutions wrongly, so libtorch cannot be the reference).
// No torch, no cgo.
package refconv

// Shape is a convolution: input [N, C, H, W], weight [OC, C/Groups, KH, KW], and its
// parameters (Groups 0 counts as 1).
type Shape struct {
	N, C, H, W, OC, KH, KW    int
	Stride, Padding, Dilation [2]int
	Groups                    int
}

// Out is the output's height and width.
func (s Shape) Out() (oh, ow int) {
	return (s.H+2*s.Padding[0]-s.Dilation[0]*(s.KH-1)-1)/s.Stride[0] + 1,
		(s.W+2*s.Padding[1]-s.Dilation[1]*(s.KW-1)-1)/s.Stride[1] + 1
}

// Conv2d is x convolved with w, plus b when it is not nil, through a relu when asked: the
// output [N, OC, oh, ow] in NCHW order, each sum taken in float64.
func Conv2d(x, w, b []float32, s Shape, relu bool) []float64 {
	g := max(s.Groups, 1)
	oh, ow := s.Out()
	icg, ocg := s.C/g, s.OC/g
	out := make([]float64, 0, s.N*s.OC*oh*ow)
	for n := range s.N {
		for o := range s.OC {
			for y := range oh {
				for z := range ow {
					sum := 0.0
					if b != nil {
						sum = float64(b[o])
					}
					for i := range icg {
						c := o/ocg*icg + i
						for ky := range s.KH {
							iy := y*s.Stride[0] - s.Padding[0] + ky*s.Dilation[0]
							if iy < 0 || iy >= s.H {
								continue
							}
							for kx := range s.KW {
								ix := z*s.Stride[1] - s.Padding[1] + kx*s.Dilation[1]
								if ix < 0 || ix >= s.W {
									continue
								}
								sum += float64(x[((n*s.C+c)*s.H+iy)*s.W+ix]) * float64(w[((o*icg+i)*s.KH+ky)*s.KW+kx])
							}
						}
					}
					if relu {
						sum = max(sum, 0)
					}
					out = append(out, sum)
				}
			}
		}
	}
	return out
}
