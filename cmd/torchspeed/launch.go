package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/torchspeed/torchspeed/internal/exitcode"
	"github.com/torchspeed/torchspeed/internal/safefile"

	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/launch"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

type launchCmd struct {
	ui         *ui
	opts       runenv.Options
	mode       string
	latency    bool // old spelling of --mode latency
	throughput bool // old spelling of --mode throughput
	printEnv   bool
	asJSON     bool
	logDir     string
	artifact   string

	// The hidden trampoline mode (launch.SelfTrampoline) for callers of pkg/launch that
	// want torchspeed to pin and exec inside the child.
	internalExec    bool
	internalCPUs    string
	internalMemBind int
}

func newLaunchCmd(u *ui) *cobra.Command {
	l := &launchCmd{ui: u}
	c := &cobra.Command{
		Use:   "launch [flags] -- COMMAND [ARGS...]",
		Short: "Run a program pinned to cores and a NUMA node with tuned OpenMP and allocator settings",
		Long: `launch works out per-instance settings from this machine (one thread per physical core,
packed within a NUMA node, within the cgroup's cpuset and quota), then starts COMMAND once
per instance with its CPU affinity and memory policy set before the command's first
instruction (inherited from a pinned launcher thread), and with OMP_NUM_THREADS, OMP_PLACES,
OMP_PROC_BIND, OMP_WAIT_POLICY (or the Intel runtime's KMP_* with --openmp intel),
MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, TORCHSPEED_INSTANCE, TORCHSPEED_INSTANCES and, with
--allocator, LD_PRELOAD. Signals (INT, TERM, HUP) go to every instance, and an instance is
killed if launch itself dies (SIGKILL, the OOM killer); the exit code is the worst instance's.
numactl and taskset are not needed.

A variable the command's environment already sets to another value is overridden, and
launch says so.

  torchspeed launch --instances 2 -- sh -c 'grep Cpus_allowed_list /proc/self/status'
  torchspeed launch --mode latency --allocator jemalloc -- python serve.py
  eval "$(torchspeed launch --print-env --mode latency)"`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error { return l.run(c, args) },
	}
	f := c.Flags()
	// Flags after COMMAND belong to COMMAND.
	f.SetInterspersed(false)
	o := &l.opts
	f.IntVar(&o.Instances, "instances", 0, "number of instances (0: 1, or one per NUMA node with --throughput-mode)")
	f.IntVar(&o.CoresPerInstance, "cores-per-instance", 0, "physical cores per instance (0: split the usable cores evenly)")
	f.IntVar(&o.ReserveCores, "reserve-cores", 0, "physical cores to leave free, from the first one")
	f.StringVar(&o.CPUs, "cpus", "", "CPUs to use, in list form (0-7,16); default: all this process may use")
	f.IntSliceVar(&o.NUMANodes, "numa-node", nil, "NUMA node(s) to run on (default: all)")
	f.IntVar(&o.Threads, "threads", 0, "intra-op threads per instance (0: one per CPU used)")
	f.IntVar(&o.InteropThreads, "interop-threads", 0, "inter-op threads per instance, passed as TORCHSPEED_INTEROP_THREADS (0: 1)")
	f.StringVar(&o.Allocator, "allocator", "default", "memory allocator to preload: jemalloc, tcmalloc or default (glibc)")
	f.StringVar(&o.WaitPolicy, "wait-policy", "", "OpenMP wait policy: active, or passive (workers sleep at once when idle) (default: the OpenMP runtime's own, measured faster than a passive preset at equal threads; active in throughput mode)")
	f.StringVar(&o.OpenMP, "openmp", "auto", "OpenMP runtime the command uses: auto (the one torchspeed's libtorch loaded), gnu, intel or llvm")
	f.BoolVar(&o.UseSMT, "use-smt", false, "use both hardware threads of each core")
	f.BoolVar(&o.NoMemBind, "no-membind", false, "do not bind memory to the instance's NUMA node")
	f.BoolVar(&o.NoThreadBind, "no-thread-bind", false, "leave out OMP_PROC_BIND/OMP_PLACES (KMP_AFFINITY): use it for Go programs, whose threads would all inherit the first CPU; affinity still confines the instance")
	f.StringVar(&l.mode, "mode", "", "preset: latency (one request at a time: one instance on one node, passive waiting on few cores) or throughput (many requests: one instance per NUMA node, spinning workers)")
	f.BoolVar(&l.latency, "latency-mode", false, "same as --mode latency")
	f.BoolVar(&l.throughput, "throughput-mode", false, "same as --mode throughput")
	f.StringVar(&l.logDir, "log-dir", "", "write each instance's stdout and stderr to FOLDER/instance-N.log instead of this terminal (as ipexrun's --log_dir)")
	f.StringVar(&l.artifact, "artifact", "", "apply the OpenMP wait policy and allocator optimize measured fastest for this artifact (its manifest's runtime); --wait-policy and --allocator win over it")
	f.BoolVar(&l.printEnv, "print-env", false, "print the settings as shell exports (JSON with --json) and start nothing")
	f.BoolVar(&l.asJSON, "json", false, "print settings (--print-env) or the per-instance exit summary as JSON on stdout")
	f.BoolVar(&l.internalExec, "internal-exec", false, "trampoline mode used by launch itself")
	f.StringVar(&l.internalCPUs, "internal-cpus", "", "trampoline: CPUs to pin to")
	f.IntVar(&l.internalMemBind, "internal-membind", -1, "trampoline: NUMA node to bind memory to")
	completeEnums(c, map[string][]string{"mode": modes, "allocator": allocators, "wait-policy": {"active", "passive"}, "openmp": {"auto", "gnu", "intel", "llvm"}})
	for _, h := range []string{"internal-exec", "internal-cpus", "internal-membind", "latency-mode", "throughput-mode"} {
		_ = f.MarkHidden(h)
	}
	return c
}

func (l *launchCmd) run(c *cobra.Command, args []string) error {
	if l.internalExec {
		spec := launch.Spec{MemNode: l.internalMemBind}
		var err error
		if spec.CPUs, err = cpu.ParseCPUList(l.internalCPUs); err != nil {
			return exitcode.New(exitcode.Usage, err)
		}
		return launch.Exec(spec, args, c.ErrOrStderr())
	}
	if err := l.resolveMode(); err != nil {
		return err
	}
	if !l.printEnv && len(args) == 0 {
		return exitcode.Usagef("launch: no command; give it after --, e.g. torchspeed launch --instances 2 -- python serve.py")
	}
	probe, err := cpu.Detect(cpu.Options{})
	if err != nil {
		return err
	}
	settings, err := runenv.Compute(probe, l.opts)
	if err != nil {
		return exitcode.New(exitcode.Usage, fmt.Errorf("launch: %w", err))
	}
	if err := l.applyArtifact(c, settings); err != nil {
		return err
	}
	out := c.OutOrStdout()
	if l.printEnv {
		if l.asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(settings)
		}
		for _, s := range settings {
			// The output is meant for eval: a newline in a note would end its comment and
			// run what follows.
			s.Notes = oneLines(s.Notes)
			if _, err := fmt.Fprint(out, s.ShellExports()); err != nil {
				return err
			}
		}
		return nil
	}
	// Children start from pinned threads of this process (see pkg/launch): no
	// trampoline, so an instance does not pay for loading libtorch twice.
	logs, err := l.logFiles(settings, l.ui.logOrDiscard(c.ErrOrStderr()))
	if err != nil {
		return err
	}
	defer closeAll(logs)
	cfg := launch.Config{
		Settings: settings,
		Command:  args,
		Stdin:    os.Stdin,
		Stdout:   out,
		Stderr:   c.ErrOrStderr(),
		Outputs:  logs,
	}
	if log := l.ui.log(c.ErrOrStderr()); log != nil {
		cfg.Log = log
		for _, n := range oneLines(settings[0].Notes) {
			fmt.Fprintf(log, "torchspeed launch: note: %s\n", n)
		}
	}
	// Always said, even with --quiet: a value the user set that silently changed would make
	// their measurement mean something else.
	for _, n := range overrides(settings, os.Environ()) {
		fmt.Fprintf(c.ErrOrStderr(), "torchspeed launch: note: %s\n", n)
	}
	res, err := launch.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	if l.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	if res.ExitCode != 0 {
		var failed []string
		for _, r := range res.Instances {
			if r.ExitCode != 0 {
				why := fmt.Sprintf("exit %d", r.ExitCode)
				if r.Signal != "" {
					why = "killed by " + r.Signal
				}
				failed = append(failed, fmt.Sprintf("instance %d (%s)", r.Instance, why))
			}
		}
		return exitcode.New(res.ExitCode, errors.New("launch: "+strings.Join(failed, ", ")))
	}
	return nil
}

// logFiles opens FOLDER/instance-N.log for each instance (N its TORCHSPEED_INSTANCE), for
// appending. The folder may be shared: a link planted at one of those names would have the
// instance's output written wherever it points, so a link, a hard-linked file or anything but
// a regular file there is refused before any instance starts.
func (l *launchCmd) logFiles(settings []runenv.Settings, log io.Writer) ([]*os.File, error) {
	if l.logDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(l.logDir, 0o777); err != nil {
		return nil, exitcode.Usagef("launch: --log-dir %q: %v", l.logDir, err)
	}
	if err := safefile.CheckWritableDir(l.logDir); err != nil {
		return nil, exitcode.Usagef("launch: --log-dir: %v", err)
	}
	dir, err := filepath.Abs(l.logDir)
	if err != nil {
		return nil, exitcode.Usagef("launch: --log-dir %q: %v", l.logDir, err)
	}
	var files []*os.File
	for _, s := range settings {
		f, err := openLog(filepath.Join(dir, fmt.Sprintf("instance-%d.log", s.Instance)))
		if err != nil {
			closeAll(files)
			return nil, exitcode.Usagef("launch: --log-dir: %v", err)
		}
		files = append(files, f)
	}
	fmt.Fprintf(log, "torchspeed launch: %d instance log(s) in %s/instance-N.log\n", len(settings), dir)
	return files, nil
}

// openLog opens path for appending without following a link (O_NOFOLLOW) or blocking on a
// pipe (O_NONBLOCK), and refuses what is not a regular file of one link.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o666)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: refusing to write through it; remove it, or choose another --log-dir", path)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w: choose another --log-dir", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file (%s): remove it, or choose another --log-dir", path, st.Mode().Type())
	case sys != nil && sys.Nlink > 1:
		f.Close()
		return nil, fmt.Errorf("%s has %d hard links: another file shares it; remove it, or choose another --log-dir", path, sys.Nlink)
	}
	return f, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// resolveMode reads --mode (or its old spellings) into the options.
func (l *launchCmd) resolveMode() error {
	mode := l.mode
	for _, old := range []struct {
		set  bool
		mode string
	}{{l.latency, "latency"}, {l.throughput, "throughput"}} {
		if !old.set {
			continue
		}
		if mode != "" && mode != old.mode {
			return exitcode.Usagef("launch: --mode %s and --%s-mode exclude each other", mode, old.mode)
		}
		mode = old.mode
	}
	if mode == "" {
		return nil
	}
	m, err := runenv.ParseMode(mode)
	if err != nil {
		return exitcode.Usagef("launch: --mode %q: want latency or throughput", mode)
	}
	l.opts.Mode = m
	return nil
}

// overrides lists the variables the user had set that the instances get with another value
// (OMP_NUM_THREADS=7 becoming 2), each once.
func overrides(settings []runenv.Settings, environ []string) []string {
	user := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			user[k] = v
		}
	}
	seen := map[string]bool{}
	var notes []string
	for _, s := range settings {
		for _, v := range s.Vars {
			old, set := user[v.Name]
			if !set || old == v.Value || seen[v.Name] || runenv.ListVar(v.Name) {
				continue
			}
			seen[v.Name] = true
			notes = append(notes, fmt.Sprintf("%s=%s from your environment is overridden: the instances get %s=%s (unset it, or pass the matching launch flag, to choose)", v.Name, old, v.Name, v.Value))
		}
	}
	return notes
}

// oneLines returns notes with every control character (newline, NUL, escape) and Unicode line
// separator written as a Go escape, so each note stays one line of a shell comment or a log.
func oneLines(notes []string) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		q := strconv.Quote(n)
		out[i] = q[1 : len(q)-1]
	}
	return out
}
