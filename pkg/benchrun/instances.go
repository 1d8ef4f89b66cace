package benchrun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/torchspeed/torchspeed/pkg/bench"
	"github.com/torchspeed/torchspeed/pkg/launch"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// DriverEnv names the variable that gives each instance RunInstances starts the driver's
// process id (see FollowDriver).
const DriverEnv = "TORCHSPEED_BENCH_DRIVER"

// FollowDriver makes this process die with the driver that started it through RunInstances,
// when DriverEnv says one did; otherwise it does nothing. It asks the kernel for SIGKILL when
// the parent ends (PR_SET_PDEATHSIG), then returns an error if the parent is no longer the
// driver, which has ended already. Call it from an init function: the request belongs to the
// calling thread, and Go runs init on the main thread, the one thread it never ends. The
// driver's own request for its children does not reach an instance: the trampoline execs it
// from whichever thread runs its launch code, and a new thread starts without the request.
func FollowDriver() error {
	v := os.Getenv(DriverEnv)
	if v == "" {
		return nil
	}
	pid, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%s=%q: not a process id", DriverEnv, v)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
		return fmt.Errorf("bench: instance: ask to die with the driver: %v", e)
	}
	if os.Getppid() != pid {
		return fmt.Errorf("bench: instance: the driver (pid %d) has ended", pid)
	}
	return nil
}

// InstancesConfig describes a multi-process throughput run (see RunInstances).
type InstancesConfig struct {
	// Name is the model's name in the result.
	Name string
	// Settings has one entry per instance, from runenv.Compute.
	Settings []runenv.Settings
	// Trampoline is the command prefix that pins a child to its CPUs and memory node and
	// execs its command (launch.SelfTrampoline of a torchspeed binary).
	Trampoline []string
	// Command returns instance i's serve command: a program that speaks ServeRounds'
	// protocol on stdin and stdout (`torchspeed bench --serve ... --runtime default`).
	Command func(i int) []string
	// Env is the environment the instances start from; nil means os.Environ(). Each
	// instance gets its settings' variables on top (runenv.Settings.Environ).
	Env []string
	// Runs is the number of timed inferences per instance.
	Runs int
	// Batch is items per inference, for items/s; 0 takes dimension 0 of the first
	// input-shape the instances report.
	Batch int
	// Stderr receives the instances' stderr lines, each prefixed "instance N: "; nil
	// discards them (the last lines still go into errors).
	Stderr io.Writer
	// Log receives the driver's own lines (where each instance runs, when all are ready).
	Log io.Writer
}

// InstancesResult is the outcome of RunInstances.
type InstancesResult struct {
	Throughput *bench.ThroughputResult
	// Ready holds each instance's settings, as it reported them when ready.
	Ready []map[string]string
}

// RunInstances measures throughput with one process per instance: it starts every
// instance's serve command through the trampoline (so each runs pinned, with its memory
// bound and its environment, from its first instruction), waits until all are ready and
// checks that each reports the CPUs (key "affinity"), thread count and instance number it
// was given, sends "run Runs" to all at once and reads every answer. Elapsed runs from the
// sending to the last answer; PerStream has one entry per instance.
//
// The instances are always stopped: with "quit" after a successful run, killed (their
// process groups, with SIGKILL) on any error or when ctx is cancelled, and killed by the
// kernel should this process die first. A cancelled ctx returns ctx's error.
func RunInstances(ctx context.Context, cfg InstancesConfig) (*InstancesResult, error) {
	n := len(cfg.Settings)
	if n == 0 {
		return nil, errors.New("bench: instances: no instance settings")
	}
	if cfg.Runs < 1 {
		return nil, fmt.Errorf("bench: instances: runs = %d: must be 1 or more", cfg.Runs)
	}
	if len(cfg.Trampoline) == 0 || cfg.Command == nil {
		return nil, errors.New("bench: instances: no trampoline or serve command")
	}
	base := cfg.Env
	if base == nil {
		base = os.Environ()
	}
	logw := orDiscard(cfg.Log)
	g := &group{stderr: orDiscard(cfg.Stderr)}
	defer g.stop()
	if err := g.start(func() error { return g.spawn(cfg, base) }); err != nil {
		return nil, err
	}
	for _, c := range g.children {
		s := cfg.Settings[c.i]
		where := fmt.Sprintf("node %d", s.NUMANode)
		if s.NUMANode < 0 {
			where = "several nodes"
		}
		fmt.Fprintf(logw, "bench: instance %d/%d pid %d on CPUs %s (%s), %d thread(s)\n",
			c.i, n, c.cmd.Process.Pid, s.CPUs, where, s.Threads)
	}

	// Every instance loads the model, makes its inputs and warms up, then says ready.
	lines, err := g.readAll(ctx, "before it was ready")
	if err != nil {
		return nil, err
	}
	res := &InstancesResult{Ready: make([]map[string]string, n)}
	for i, line := range lines {
		raw, ok := strings.CutPrefix(line, "ready ")
		if !ok {
			return nil, g.childErr(i, fmt.Errorf("want \"ready {settings}\", got %q", line))
		}
		if err := json.Unmarshal([]byte(raw), &res.Ready[i]); err != nil {
			return nil, g.childErr(i, fmt.Errorf("ready settings %q: %v", raw, err))
		}
		if err := checkReady(i, cfg.Settings[i], res.Ready[i]); err != nil {
			return nil, g.childErr(i, err)
		}
	}
	fmt.Fprintf(logw, "bench: %d instance(s) ready; %d timed runs each, all at once\n", n, cfg.Runs)

	start := time.Now()
	for _, c := range g.children {
		if _, err := fmt.Fprintf(c.in, "run %d\n", cfg.Runs); err != nil {
			return nil, g.childErr(c.i, fmt.Errorf("send \"run %d\": %v", cfg.Runs, err))
		}
	}
	if lines, err = g.readAll(ctx, fmt.Sprintf("before answering \"run %d\"", cfg.Runs)); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)

	batch := cfg.Batch
	if batch == 0 {
		batch = batchOf(res.Ready[0]["input-shape"])
	}
	tr := &bench.ThroughputResult{Name: cfg.Name, Streams: n, Batch: batch, Threads: cfg.Settings[0].Threads, Elapsed: elapsed}
	var all []time.Duration
	for i, line := range lines {
		samples, err := ParseAnswer(line, cfg.Runs)
		if err != nil {
			return nil, g.childErr(i, err)
		}
		st, err := bench.Summarize(samples)
		if err != nil {
			return nil, fmt.Errorf("bench: instance %d: %w", i, err)
		}
		tr.PerStream = append(tr.PerStream, bench.StreamResult{Stream: i, Runs: len(samples), Stats: st, Samples: samples})
		tr.Inferences += len(samples)
		all = append(all, samples...)
	}
	if tr.Latency, err = bench.Summarize(all); err != nil {
		return nil, fmt.Errorf("bench: instances: %w", err)
	}
	if elapsed > 0 {
		tr.PerSecond = float64(tr.Inferences) / elapsed.Seconds()
		tr.ItemsPerSecond = tr.PerSecond * float64(batch)
	}
	res.Throughput = tr
	if err := g.quit(); err != nil {
		return nil, err
	}
	return res, nil
}

// checkReady compares what an instance reports with the settings it was started with: a
// mismatch means the pinning or the environment did not reach it.
func checkReady(i int, s runenv.Settings, got map[string]string) error {
	var bad []string
	if v := got["affinity"]; v != s.CPUs.String() {
		bad = append(bad, fmt.Sprintf("runs on CPUs %q, was given %s", v, s.CPUs))
	}
	if v := got["threads"]; v != strconv.Itoa(s.Threads) {
		bad = append(bad, fmt.Sprintf("uses %q threads, was given %d", v, s.Threads))
	}
	if v := got["instance"]; v != strconv.Itoa(i) {
		bad = append(bad, fmt.Sprintf("reports TORCHSPEED_INSTANCE %q, want %d", v, i))
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// batchOf reads dimension 0 of the first shape in an input-shape setting ("4x3x224x224,1x16").
func batchOf(shapes string) int {
	first, _, _ := strings.Cut(shapes, ",")
	d0, _, _ := strings.Cut(first, "x")
	if b, err := strconv.Atoi(d0); err == nil && b > 0 {
		return b
	}
	return 1
}

// parseAnswer reads "ns L1 ... Lk", the answer to "run k".
func ParseAnswer(line string, k int) ([]time.Duration, error) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "ns" {
		return nil, fmt.Errorf("answer to \"run %d\": %q", k, line)
	}
	if len(f) != k+1 {
		return nil, fmt.Errorf("answer to \"run %d\" has %d latencies", k, len(f)-1)
	}
	out := make([]time.Duration, k)
	for i, v := range f[1:] {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ns < 0 {
			return nil, fmt.Errorf("answer to \"run %d\": latency %q is not a count of nanoseconds", k, v)
		}
		out[i] = time.Duration(ns)
	}
	return out, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// child is one serve process.
type child struct {
	i      int
	what   string // "instance 2", "runtime candidate passive": how messages name it
	cmd    *exec.Cmd
	in     io.WriteCloser
	outR   *os.File // read end of its stdout, closed by group.stop
	out    *bufio.Reader
	stderr *tailWriter
	exited chan struct{} // closed once Wait returned; waitErr is set by then
	// waitErr is what Wait returned.
	waitErr error
}

// group is the running instances.
type group struct {
	stderr   io.Writer
	children []*child
	// release ends the spawner goroutine, whose OS thread started the children (see start).
	release chan struct{}
	stopped bool
}

// start starts every instance, or none: when one fails to start, those already running
// are killed.
//
// The children are started from one locked OS thread that lives until every child has
// been waited for: PR_SET_PDEATHSIG fires when the thread that forked a child ends, so the
// kernel kills the instances if this process dies without stopping them (SIGKILL, a crash),
// and never while it still runs.
func (g *group) start(spawn func() error) error {
	g.release = make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		errc <- spawn()
		<-g.release
	}()
	return <-errc
}

func (g *group) spawn(cfg InstancesConfig, base []string) error {
	for i, s := range cfg.Settings {
		node := -1
		if s.MemBind {
			node = s.NUMANode
		}
		argv := append(append([]string(nil), cfg.Trampoline...), launch.TrampolineArgs(launch.Spec{CPUs: s.CPUs, MemNode: node}, cfg.Command(i))...)
		if err := g.spawnOne(fmt.Sprintf("instance %d", i), argv, append(s.Environ(base), fmt.Sprintf("%s=%d", DriverEnv, os.Getpid()))); err != nil {
			return err
		}
	}
	return nil
}

// spawnOne starts one serve process, named what in messages, with argv and env.
func (g *group) spawnOne(what string, argv, env []string) error {
	i := len(g.children)
	c := &child{i: i, what: what, cmd: exec.Command(argv[0], argv[1:]...), exited: make(chan struct{})}
	c.cmd.Env = env
	c.stderr = &tailWriter{w: g.stderr, prefix: what + ": "}
	c.cmd.Stderr = c.stderr
	// A group of its own, so a terminal's ^C reaches the instances only through this
	// process, which kills them; and a parent-death signal as the backstop while the
	// trampoline runs (the instance asks again, see FollowDriver).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		return err
	}
	// Our own pipe, not StdoutPipe: Wait (which runs as soon as the child exits) would
	// close StdoutPipe's read end under a reader and lose what is still buffered.
	var w *os.File
	if c.outR, w, err = os.Pipe(); err != nil {
		c.in.Close()
		return err
	}
	c.cmd.Stdout = w
	err = c.cmd.Start()
	w.Close()
	if err != nil {
		c.in.Close()
		c.outR.Close()
		return fmt.Errorf("bench: start %s (%s): %w", what, argv[0], err)
	}
	c.out = bufio.NewReaderSize(c.outR, 1<<20)
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	g.children = append(g.children, c)
	return nil
}

// line is one line an instance wrote, or why none came.
type line struct {
	i    int
	text string
	err  error
}

// readAll reads one line from every instance. It fails as soon as one instance fails, or
// when ctx is cancelled; when says when an instance that ended did so, for the error.
func (g *group) readAll(ctx context.Context, when string) ([]string, error) {
	lines := make(chan line, len(g.children))
	for _, c := range g.children {
		go func(c *child) {
			s, err := c.out.ReadString('\n')
			lines <- line{c.i, strings.TrimSpace(s), err}
		}(c)
	}
	out := make([]string, len(g.children))
	for range g.children {
		select {
		case l := <-lines:
			if l.err != nil {
				return nil, g.childErr(l.i, fmt.Errorf("%w %s", g.exitReason(l.i, l.err), when))
			}
			if msg, ok := strings.CutPrefix(l.text, "error "); ok {
				return nil, g.childErr(l.i, errors.New(msg))
			}
			out[l.i] = l.text
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// exitReason turns a failed read into how the instance ended, once it has.
func (g *group) exitReason(i int, readErr error) error {
	c := g.children[i]
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		return readErr
	}
	if c.waitErr != nil {
		return fmt.Errorf("it exited (%v)", c.waitErr)
	}
	return errors.New("it exited (status 0)")
}

// childErr names the instance and adds the end of its stderr, after stopping every instance
// so that the stderr is complete.
func (g *group) childErr(i int, err error) error {
	g.stop()
	c := g.children[i]
	msg := fmt.Sprintf("bench: %s (pid %d): %v", c.what, c.cmd.Process.Pid, err)
	if tail := c.stderr.tail(); tail != "" {
		msg += "; its stderr ends:\n" + tail
	}
	return errors.New(msg)
}

// quit asks every instance to stop, and kills those that have not after a while.
func (g *group) quit() error {
	for _, c := range g.children {
		fmt.Fprintln(c.in, "quit")
		c.in.Close()
	}
	timeout := time.After(30 * time.Second)
	var errs []error
	for _, c := range g.children {
		select {
		case <-c.exited:
			if c.waitErr != nil {
				errs = append(errs, fmt.Errorf("bench: %s: %v after quit", c.what, c.waitErr))
			}
		case <-timeout:
			errs = append(errs, fmt.Errorf("bench: %s did not quit within 30s; killed", c.what))
			g.stop()
		}
	}
	g.stop()
	return errors.Join(errs...)
}

// stop kills every instance still running (its whole process group), waits for all of them
// and releases their pipes and the spawner thread. It is idempotent.
func (g *group) stop() {
	if g.stopped {
		return
	}
	g.stopped = true
	for _, c := range g.children {
		select {
		case <-c.exited:
			continue
		default:
		}
		if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			_ = c.cmd.Process.Kill()
		}
	}
	for _, c := range g.children {
		<-c.exited
		c.in.Close()
		c.outR.Close()
	}
	if g.release != nil {
		close(g.release)
	}
}

// tailWriter passes lines on with a prefix and keeps the last few for error messages.
type tailWriter struct {
	w      io.Writer
	prefix string
	mu     sync.Mutex
	part   []byte   // an unfinished line
	last   []string // the last tailLines lines
}

const tailLines = 8

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.part = append(t.part, p...)
	for {
		k := strings.IndexByte(string(t.part), '\n')
		if k < 0 {
			break
		}
		t.add(string(t.part[:k]))
		t.part = t.part[k+1:]
	}
	return len(p), nil
}

func (t *tailWriter) add(l string) {
	fmt.Fprintf(t.w, "%s%s\n", t.prefix, l)
	t.last = append(t.last, l)
	if len(t.last) > tailLines {
		t.last = t.last[len(t.last)-tailLines:]
	}
}

// tail returns the last lines written, the unfinished one included.
func (t *tailWriter) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := append([]string(nil), t.last...)
	if len(t.part) > 0 {
		lines = append(lines, string(t.part))
	}
	return strings.Join(lines, "\n")
}
