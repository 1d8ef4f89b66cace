package mkldnncheck

// Pattern and DirectConv are the probe's inputs and reference, for tests.
var (
	Pattern    = pattern
	DirectConv = directConv
)
