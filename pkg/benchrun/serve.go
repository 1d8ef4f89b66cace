package benchrun

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/bench"
)

// ServeRounds keeps one model loaded and answers each "run K" line on in with "ns" and the K
// latencies in nanoseconds, timed by bench.Run (the loop `torchspeed bench` uses) on the
// inference worker thread; each round's first inference is timed apart and left out, so it
// also re-warms caches another process used meanwhile. Garbage is collected once, before the
// warm-up, not in every round (see bench.Options.SkipGC). It first makes the inputs from ins
// and seed, runs warmup untimed runs and prints "ready" with settings as JSON; "quit" or the
// end of in stops it. A line it cannot read gets an "error" line and the loop goes on; a
// failed inference ends it with that error. It is the protocol of the hidden `bench --serve`,
// with which a driver process alternates rounds between processes whose OpenMP settings
// differ.
func ServeRounds(in io.Reader, out io.Writer, l *Loaded, ins []InputSpec, seed uint64, warmup int, settings map[string]string) error {
	inputs, err := MakeInputs(ins, 0, seed)
	if err != nil {
		return err
	}
	defer CloseTensors(inputs)
	return ServeTarget(in, out, l.Target(inputs), warmup, settings)
}

// ServeTarget is ServeRounds on any target (a SessionTarget for models whose arguments are
// not all tensors).
func ServeTarget(in io.Reader, out io.Writer, t bench.Target, warmup int, settings map[string]string) (err error) {
	torch.Do(func() { _, err = bench.Run(t, bench.Options{Runs: 1, Warmup: warmup}) })
	if err != nil {
		return err
	}
	raw, err := json.Marshal(settings)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "ready %s\n", raw)
	if err := w.Flush(); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "quit" {
			return nil
		}
		f := strings.Fields(line)
		k := 0
		if len(f) == 2 && f[0] == "run" {
			k, _ = strconv.Atoi(f[1])
		}
		if k < 1 {
			fmt.Fprintf(w, "error %q: want \"run K\" with K >= 1, or \"quit\"\n", line)
		} else {
			var r *bench.Result
			torch.Do(func() { r, err = bench.Run(t, bench.Options{Runs: k, SkipGC: true}) })
			if err != nil {
				fmt.Fprintf(w, "error %v\n", err)
				w.Flush()
				return err
			}
			w.WriteString("ns")
			for _, d := range r.Samples {
				w.WriteString(" " + strconv.FormatInt(int64(d), 10))
			}
			w.WriteString("\n")
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}
