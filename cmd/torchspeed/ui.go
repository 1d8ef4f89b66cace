package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// The --progress choices.
const (
	progressAuto   = "auto"   // bars on a terminal, timestamped lines otherwise
	progressAlways = "always" // bars even when stderr is a file or pipe
	progressNever  = "never"  // no progress; logs and warnings stay
)

// ui is how every command talks to the user on stderr: the global --progress and --quiet.
type ui struct {
	progress string
	quiet    bool
}

func (u *ui) addFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&u.progress, "progress", progressAuto, "progress on stderr: auto (a bar on a terminal, timestamped lines otherwise), always (bars) or never")
	f.BoolVarP(&u.quiet, "quiet", "q", false, "print no progress or log lines on stderr, only warnings and errors")
	_ = root.RegisterFlagCompletionFunc("progress", fixedCompletion(progressAuto, progressAlways, progressNever))
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if err := u.validate(); err != nil {
			return err
		}
		return checkISAEnv(c)
	}
}

// checkISAEnv refuses, before libtorch runs anything, an ATEN_CPU_CAPABILITY or
// OPENBLAS_CORETYPE that names kernels this CPU lacks: they would stop the command (or the
// programs launch starts) on an illegal instruction. probe reports them as findings instead,
// and commands that run no model need not care.
func checkISAEnv(c *cobra.Command) error {
	top := c
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	switch top.Name() {
	case "probe", "version", "config", "help", "completion", "__complete":
		return nil
	}
	p, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return nil // the command itself reads the CPU and says what failed
	}
	if err := runenv.CheckISAEnv(os.LookupEnv, runenv.MachineOf(p)); err != nil {
		return exitcode.New(exitcode.Usage, err)
	}
	return nil
}

func (u *ui) validate() error {
	switch u.progress {
	case progressAuto, progressAlways, progressNever:
		return nil
	}
	return exitcode.Usagef("--progress %q: want auto, always or never", u.progress)
}

// fixedCompletion completes a flag with a fixed list of values (shell completion).
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// log is where progress and log lines go: nil with --quiet, w itself on a terminal, and
// w with a timestamp before each line otherwise (CI logs, files), as benchmark_app's
// -stream_output does.
func (u *ui) log(w io.Writer) io.Writer {
	if u.quiet {
		return nil
	}
	if isTerminal(w) {
		return w
	}
	return &stampWriter{w: w, now: time.Now}
}

// logOrDiscard is log(w), or io.Discard with --quiet.
func (u *ui) logOrDiscard(w io.Writer) io.Writer {
	if l := u.log(w); l != nil {
		return l
	}
	return io.Discard
}

// bars reports whether progress is drawn as bars on w.
func (u *ui) bars(w io.Writer) bool {
	return u.progress == progressAlways || u.progress == progressAuto && isTerminal(w)
}

// progressFunc reports done of total for a named stage: a bar per stage on a terminal, or a
// timestamped line at most every few seconds (and at the end) otherwise; nil with --quiet or
// --progress never.
func (u *ui) progressFunc(w io.Writer) func(stage string, done, total int) {
	if u.quiet || u.progress == progressNever {
		return nil
	}
	if u.bars(w) {
		return progressBars(w)
	}
	return progressLines(u.log(w), 2*time.Second)
}

// progressBars draws one bar per stage.
func progressBars(w io.Writer) func(stage string, done, total int) {
	var mu sync.Mutex
	bars := map[string]*progressbar.ProgressBar{}
	return func(stage string, done, total int) {
		mu.Lock()
		defer mu.Unlock()
		b, ok := bars[stage]
		if !ok {
			b = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(stage),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
			bars[stage] = b
		}
		_ = b.Set(done)
		if done >= total {
			_ = b.Finish()
		}
	}
}

// progressLines writes "stage: done/total" lines: the first, then at most one per interval,
// and the last, so a log shows that a long step moves without a line per sample.
func progressLines(w io.Writer, every time.Duration) func(stage string, done, total int) {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(stage string, done, total int) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		t, seen := last[stage]
		if seen && done < total && now.Sub(t) < every {
			return
		}
		last[stage] = now
		fmt.Fprintf(w, "%s: %d/%d\n", stage, done, total)
		if done >= total {
			delete(last, stage)
		}
	}
}

// stampWriter puts a time stamp before every line written through it.
type stampWriter struct {
	mu      sync.Mutex
	w       io.Writer
	now     func() time.Time
	midLine bool
}

func (s *stampWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf bytes.Buffer
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if !s.midLine {
			buf.WriteString(s.now().Format("15:04:05.000 "))
		}
		buf.Write(line)
		s.midLine = line[len(line)-1] != '\n'
	}
	if _, err := s.w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
