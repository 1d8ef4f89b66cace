// Package plot draws torchspeed's benchmark figures with gonum.org/v1/plot:
// the latency distribution of each model (box plots) and a sweep's median
// latency against throughput with its Pareto front. Every figure is written
// as PNG and SVG, atomically, so a Markdown report can reference either.
package plot

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/bench"
)

// Formats are the file types every figure is written in.
var Formats = []string{"png", "svg"}

// Series is one named latency distribution.
type Series struct {
	Name    string
	Samples []time.Duration
}

// SeriesFromResults turns benchmark results into series, one per model.
func SeriesFromResults(rs []*bench.Result) []Series {
	out := make([]Series, 0, len(rs))
	for _, r := range rs {
		if r != nil {
			out = append(out, Series{Name: r.Name, Samples: r.Samples})
		}
	}
	return out
}

// SeriesFromThroughput returns one series per stream of a throughput run, each named for
// what ran it: unit is "stream" for streams in one process, "instance" for processes.
func SeriesFromThroughput(t *bench.ThroughputResult, unit string) []Series {
	var out []Series
	for _, s := range t.PerStream {
		out = append(out, Series{Name: fmt.Sprintf("%s %d", unit, s.Stream), Samples: s.Samples})
	}
	return out
}

// logSpread is the ratio of the slowest sample to the fastest median above which the
// latency axis is logarithmic: on a linear axis 0.1 ms medians sit on the floor under 20 ms
// outliers, and the boxes the reader came for cannot be told apart.
const logSpread = 20

// rotateLabels is the longest box name (in characters) drawn level: longer names are
// tilted so that neighbours do not overlap.
const rotateLabels = 12

// Latency draws one box plot per series (box: quartiles; line: median; whiskers: 1.5 IQR;
// points: outliers, never clipped) with each series' p50, p95 and p99 marked, and writes
// dir/base.png and dir/base.svg. The legend sits in headroom above the tallest series, so it
// never covers data. Names may hold "\n" for a second label line (e.g. precision and
// threads). It returns the paths written.
func Latency(series []Series, title, dir, base string) ([]string, error) {
	p, w, err := latencyPlot(series, title)
	if err != nil {
		return nil, err
	}
	return save(p, w, 6*vg.Inch, dir, base)
}

// latencyPlot builds Latency's figure and its width.
func latencyPlot(series []Series, title string) (*plot.Plot, vg.Length, error) {
	if len(series) == 0 {
		return nil, 0, errors.New("latency plot: no series to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Y.Label.Text = "latency per inference (ms)"
	p.X.Label.Text = "box: middle half of the runs; line: median; whiskers: 1.5x the box; dots beyond them: outliers"
	p.Y.Min = 0
	names := make([]string, len(series))
	width := vg.Points(36)
	marks := []struct {
		q     float64
		name  string
		shape draw.GlyphDrawer
		xy    plotter.XYs
	}{
		{0.50, "p50 (median)", draw.CircleGlyph{}, nil},
		{0.95, "p95", draw.TriangleGlyph{}, nil},
		{0.99, "p99", draw.SquareGlyph{}, nil},
	}
	top, bottom, floor := 0.0, math.Inf(1), math.Inf(1)
	for i, s := range series {
		if len(s.Samples) == 0 {
			return nil, 0, fmt.Errorf("latency plot: series %q has no samples", s.Name)
		}
		vals := make(plotter.Values, len(s.Samples))
		for j, d := range s.Samples {
			vals[j] = float64(d) / 1e6
			top = max(top, vals[j])
		}
		box, err := plotter.NewBoxPlot(width, float64(i), vals)
		if err != nil {
			return nil, 0, fmt.Errorf("latency plot: series %q: %w", s.Name, err)
		}
		box.FillColor = plotutil.Color(i)
		box.MedianStyle.Width = vg.Points(2)
		p.Add(box)
		names[i] = s.Name
		sorted := slices.Clone([]float64(vals))
		slices.Sort(sorted)
		bottom = min(bottom, bench.Percentile(sorted, 0.5))
		if sorted[0] > 0 {
			floor = min(floor, sorted[0])
		}
		for k := range marks {
			marks[k].xy = append(marks[k].xy, plotter.XY{X: float64(i) + 0.3, Y: bench.Percentile(sorted, marks[k].q)})
		}
	}
	for k, m := range marks {
		sc, err := plotter.NewScatter(m.xy)
		if err != nil {
			return nil, 0, fmt.Errorf("latency plot: %w", err)
		}
		sc.GlyphStyle.Shape = m.shape
		sc.GlyphStyle.Radius = vg.Points(3.5)
		sc.GlyphStyle.Color = plotutil.DarkColors[k%len(plotutil.DarkColors)]
		p.Add(sc)
		p.Legend.Add(m.name, sc)
	}
	p.NominalX(names...)
	// Half a slot of margin on each side keeps long names inside the figure; headroom above
	// the highest sample (outliers included) holds the legend.
	p.X.Min, p.X.Max = -0.5, float64(len(series))-0.5
	p.Y.Max = top * 1.3
	p.Legend.Top, p.Legend.Left = true, true
	if bottom > 0 && !math.IsInf(floor, 1) && top/bottom > logSpread {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = floor/3, top*3 // headroom on a log axis is a factor
		p.Y.Label.Text = "latency per inference (ms, log scale)"
	}
	longest := 0
	for _, n := range names {
		for _, l := range strings.Split(n, "\n") {
			longest = max(longest, len([]rune(l)))
		}
	}
	if longest > rotateLabels {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.Add(plotter.NewGrid())
	w := vg.Length(max(8, 1.4*float64(len(series)))) * vg.Inch
	return p, w, nil
}

// Sweep draws median latency (x) against items/s (y) for every sweep
// point, labels each point, and joins the Pareto front; it writes
// dir/base.png and dir/base.svg.
func Sweep(s *bench.SweepResult, title, dir, base string) ([]string, error) {
	if s == nil || len(s.Rows) == 0 {
		return nil, errors.New("sweep plot: no sweep points to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "median latency (ms)"
	p.Y.Label.Text = "throughput (items/s)"
	var all, front plotter.XYs
	var labels []string
	for _, row := range s.Rows {
		if row.Result == nil {
			return nil, fmt.Errorf("sweep plot: point %s has no result", row.Point)
		}
		xy := plotter.XY{X: float64(row.Result.Latency.P50) / 1e6, Y: row.Result.ItemsPerSecond}
		if math.IsNaN(xy.Y) || math.IsInf(xy.Y, 0) {
			return nil, fmt.Errorf("sweep plot: point %s has throughput %v", row.Point, xy.Y)
		}
		all = append(all, xy)
		labels = append(labels, PointWords(row.Point))
		if row.Pareto {
			front = append(front, xy)
		}
	}
	sc, err := plotter.NewScatter(all)
	if err != nil {
		return nil, fmt.Errorf("sweep plot: %w", err)
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(3)
	p.Add(sc, plotter.NewGrid())
	p.Legend.Add("configuration", sc)
	if len(front) > 0 {
		slices.SortFunc(front, func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		line, points, err := plotter.NewLinePoints(front)
		if err != nil {
			return nil, fmt.Errorf("sweep plot: %w", err)
		}
		line.Color = plotutil.Color(1)
		points.Color = plotutil.Color(1)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(4)
		p.Add(line, points)
		p.Legend.Add("Pareto front", line, points)
	}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: all, Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("sweep plot: %w", err)
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XLeft
		lb.TextStyle[i].YAlign = draw.YBottom
	}
	p.Add(lb)
	// Throughput rises with latency along a front, so the lower right
	// corner is usually empty.
	p.Legend.Top, p.Legend.Left = false, false
	p.X.Min, p.Y.Min = 0, 0
	// Leave room for the labels right of the last point.
	_, xmax, _, ymax := plotter.XYRange(all)
	p.Y.Max = ymax * 1.15
	p.X.Max = xmax * 1.6
	return save(p, 9*vg.Inch, 6*vg.Inch, dir, base)
}

// PointWords names a sweep point in words: "batch 4, 1 thread, 2 streams".
func PointWords(p bench.Point) string {
	return fmt.Sprintf("batch %d, %s, %s", p.Batch, Count(p.Threads, "thread"), Count(p.Streams, "stream"))
}

// Count is n and word, with an s unless n is 1: "1 thread", "2 instances".
func Count(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// save writes p in every format, each atomically.
func save(p *plot.Plot, w, h vg.Length, dir, base string) ([]string, error) {
	if base == "" || strings.ContainsRune(base, filepath.Separator) {
		return nil, fmt.Errorf("plot file name %q: want a plain name such as latency", base)
	}
	var paths []string
	for _, ext := range Formats {
		wt, err := p.WriterTo(w, h, ext)
		if err != nil {
			return paths, fmt.Errorf("render %s.%s: %w", base, ext, err)
		}
		path := filepath.Join(dir, base+"."+ext)
		err = safefile.Write(path, func(out io.Writer) error {
			_, err := wt.WriteTo(out)
			return err
		})
		if err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}
