package mkldnncheck

// Pattern and ConvShape are the probe's inputs and its convolution, for tests.
var (
	Pattern   = pattern
	ConvShape = convShape
)
