// Package launch runs any program as one or more instances, each pinned to its own
// CPUs and memory node with its own environment, the way runenv computed them. It needs
// no numactl or taskset, and sets the placement before the command's first
// instruction: setting the affinity from the parent after the start would race with
// the threads the command starts at once (an OpenMP pool, a Python interpreter's).
//
// Two ways get there. By default the launcher starts each child from an OS thread it
// has pinned and bound itself: fork copies the calling thread's CPU mask and memory
// policy into the child, and execve keeps them. A trampoline (Config.Trampoline: a small
// program that pins itself and execs the command, see Exec) does the same from inside
// the child, for callers that cannot dedicate a thread; with torchspeed as the
// trampoline it costs a libtorch load (~0.7 s of CPU) per instance.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// Trampoline flags: the argument list after the trampoline prefix is
// "--internal-cpus LIST --internal-membind NODE [--internal-parent PID] -- COMMAND ARGS...".
const (
	FlagExec    = "--internal-exec"
	FlagCPUs    = "--internal-cpus"
	FlagMemBind = "--internal-membind"
	FlagParent  = "--internal-parent"
)

// Spec is what the trampoline applies before it execs the command.
type Spec struct {
	CPUs cpu.CPUSet
	// MemNode is the NUMA node to bind memory to, -1 for none.
	MemNode int
	// Parent is the launcher's pid: on Linux the command is killed when the launcher dies (a
	// parent-death signal set again on the thread that execs, which the exec'd program keeps);
	// 0 for none.
	Parent int
}

// TrampolineArgs returns the arguments that follow the trampoline prefix.
func TrampolineArgs(spec Spec, command []string) []string {
	args := []string{FlagCPUs, spec.CPUs.String(), FlagMemBind, strconv.Itoa(spec.MemNode)}
	if spec.Parent > 0 {
		args = append(args, FlagParent, strconv.Itoa(spec.Parent))
	}
	return append(append(args, "--"), command...)
}

// ParseTrampolineArgs reads what TrampolineArgs wrote.
func ParseTrampolineArgs(args []string) (Spec, []string, error) {
	spec := Spec{MemNode: -1}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--":
			if i+1 >= len(args) {
				return spec, nil, errors.New("trampoline: no command after --")
			}
			return spec, args[i+1:], nil
		case FlagCPUs, FlagMemBind, FlagParent:
			if i+1 >= len(args) {
				return spec, nil, fmt.Errorf("trampoline: %s needs a value", a)
			}
			i++
			var err error
			switch a {
			case FlagCPUs:
				spec.CPUs, err = cpu.ParseCPUList(args[i])
			case FlagMemBind:
				spec.MemNode, err = strconv.Atoi(args[i])
			default:
				if spec.Parent, err = strconv.Atoi(args[i]); err == nil && spec.Parent <= 0 {
					err = errors.New("not a process id")
				}
			}
			if err != nil {
				return spec, nil, fmt.Errorf("trampoline: %s %q: %w", a, args[i], err)
			}
		default:
			return spec, nil, fmt.Errorf("trampoline: unexpected argument %q", a)
		}
	}
	return spec, nil, errors.New("trampoline: no -- before the command")
}

// Exec applies spec to the calling thread and replaces the process with command (found
// through PATH). It returns only on failure. A memory binding the kernel refuses (a
// container's seccomp profile) is reported on warn and skipped, not fatal.
func Exec(spec Spec, command []string, warn io.Writer) error {
	if len(command) == 0 {
		return errors.New("launch: no command")
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return fmt.Errorf("launch: command %q: %w", command[0], err)
	}
	// Affinity and memory policy belong to the thread; the thread that calls execve
	// becomes the new program's only thread and keeps both.
	runtime.LockOSThread()
	if err := placeThread(spec, warn); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	// The parent-death signal the launcher set belongs to the thread it forked; when the Go
	// runtime execs from another thread, the program would lose it. Set it on this one.
	if spec.Parent > 0 {
		if err := dieWithParent(spec.Parent); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
	}
	if err := syscall.Exec(path, command, os.Environ()); err != nil {
		return fmt.Errorf("launch: exec %s: %w", path, err)
	}
	return nil
}

// Config describes a launch.
type Config struct {
	// Settings has one entry per instance.
	Settings []runenv.Settings
	// Command is the program and its arguments.
	Command []string
	// Trampoline, when set, is the command prefix that runs Exec in each child (e.g.
	// SelfTrampoline); empty starts children from a pinned thread of this process.
	Trampoline []string
	// Env is the environment the instances start from; nil means os.Environ().
	Env []string
	// Stdin goes to the single instance of a one-instance launch; several instances get
	// no input.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Outputs, when set, holds one file per instance (in Settings' order) that takes its stdout
	// and stderr in place of Stdout and Stderr.
	Outputs []*os.File
	// Log receives the launcher's own lines (which instance runs where); nil discards.
	Log io.Writer
}

// SelfTrampoline is the trampoline prefix for a torchspeed binary at exe.
func SelfTrampoline(exe string) []string { return []string{exe, "launch", FlagExec} }

// InstanceResult is how one instance ended.
type InstanceResult struct {
	Instance int        `json:"instance"`
	PID      int        `json:"pid"`
	CPUs     cpu.CPUSet `json:"cpus"`
	// ExitCode is the exit status, or 128+N when killed by signal N (as a shell says).
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Err      string `json:"error,omitempty"`
}

// Result is how the launch ended.
type Result struct {
	Instances []InstanceResult `json:"instances"`
	// ExitCode is the worst (highest) instance exit code.
	ExitCode int `json:"exit_code"`
}

// forwarded are the signals passed on to every instance.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// Run starts every instance, forwards SIGINT, SIGTERM and SIGHUP to all of them, waits
// for all to end and reports each exit. If one cannot be started, those already
// running are stopped and Run returns an error. Cancelling ctx sends SIGTERM to all.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("launch: no command; give it after --, e.g. torchspeed launch -- python serve.py")
	}
	if len(cfg.Settings) == 0 {
		return nil, errors.New("launch: no instance settings")
	}
	// Fail before starting anything when the command cannot be found.
	if _, err := exec.LookPath(cfg.Command[0]); err != nil {
		return nil, fmt.Errorf("launch: command %q: %w", cfg.Command[0], err)
	}
	base := cfg.Env
	if base == nil {
		base = os.Environ()
	}
	f := &fleet{log: cfg.Log}
	if f.log == nil {
		f.log = io.Discard
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go f.forward(ctx, sigs, done)

	res := &Result{Instances: make([]InstanceResult, len(cfg.Settings))}
	for i, s := range cfg.Settings {
		c, place := instanceCmd(cfg, i, s, base)
		if err := f.start(c, place); err != nil {
			f.abort(fmt.Sprintf("instance %d failed to start", i))
			return nil, fmt.Errorf("launch: start instance %d: %w", i, err)
		}
		res.Instances[i] = InstanceResult{Instance: i, PID: c.Process.Pid, CPUs: s.CPUs}
		where := fmt.Sprintf("node %d", s.NUMANode)
		if s.NUMANode < 0 {
			where = "several nodes"
		}
		fmt.Fprintf(f.log, "torchspeed launch: instance %d/%d pid %d on CPUs %s (%s), %d thread(s)\n",
			i, len(cfg.Settings), c.Process.Pid, s.CPUs, where, s.Threads)
	}
	f.wait(res)
	for _, r := range res.Instances {
		res.ExitCode = max(res.ExitCode, r.ExitCode)
	}
	return res, nil
}

// instanceCmd is the command of instance i with settings s, and where to start it: pinned to
// its CPUs (and memory node) from here, or, with a trampoline, unpinned (it pins itself).
func instanceCmd(cfg Config, i int, s runenv.Settings, base []string) (*exec.Cmd, Spec) {
	node := -1
	if s.MemBind {
		node = s.NUMANode
	}
	var c *exec.Cmd
	if len(cfg.Trampoline) > 0 {
		args := append(append([]string(nil), cfg.Trampoline[1:]...), TrampolineArgs(Spec{CPUs: s.CPUs, MemNode: node, Parent: os.Getpid()}, cfg.Command)...)
		c = exec.Command(cfg.Trampoline[0], args...)
	} else {
		c = exec.Command(cfg.Command[0], cfg.Command[1:]...)
	}
	c.Env = s.Environ(base)
	c.Stdout, c.Stderr = cfg.Stdout, cfg.Stderr
	if i < len(cfg.Outputs) && cfg.Outputs[i] != nil {
		c.Stdout, c.Stderr = cfg.Outputs[i], cfg.Outputs[i]
	}
	if len(cfg.Settings) == 1 {
		c.Stdin = cfg.Stdin
	}
	// A group of its own: signals reach an instance once, from us, and not a
	// second time from the terminal. On Linux, the parent-death signal ends the instance when
	// this process dies without forwarding anything (SIGKILL, the OOM killer): an
	// orphan would keep its pinned cores busy. The kernel sends it when the thread
	// that started the child ends, so startPinned keeps its thread until the
	// instance has been waited for.
	c.SysProcAttr = instanceAttr()
	// With a trampoline the instance pins itself: it starts unpinned, but from a thread
	// held until the Wait all the same, since the parent-death signal follows that thread.
	if len(cfg.Trampoline) > 0 {
		return c, Spec{MemNode: -1}
	}
	return c, Spec{CPUs: s.CPUs, MemNode: node}
}

// fleet is the instances Run started, with the threads that started them.
type fleet struct {
	log      io.Writer
	mu       sync.Mutex
	started  []*exec.Cmd
	releases []func() // ends the thread that started each instance, after its Wait
}

// signalAll sends sig to every instance started so far, saying why in the log (unless why is
// empty).
func (f *fleet) signalAll(sig syscall.Signal, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if why != "" {
		fmt.Fprintf(f.log, "torchspeed launch: %s: sending %v to %d instance(s)\n", why, sig, len(f.started))
	}
	for _, c := range f.started {
		// Each instance leads its own process group: signal the group so a shell's
		// children get it too, as they would from a terminal.
		if err := syscall.Kill(-c.Process.Pid, sig); err != nil {
			_ = c.Process.Signal(sig)
		}
	}
}

// forward passes every signal from sigs to the instances, and a cancelled ctx as SIGTERM,
// until done is closed.
func (f *fleet) forward(ctx context.Context, sigs <-chan os.Signal, done <-chan struct{}) {
	for {
		select {
		case s := <-sigs:
			f.signalAll(s.(syscall.Signal), "got "+s.String())
		case <-ctx.Done():
			f.signalAll(syscall.SIGTERM, "cancelled")
			return
		case <-done:
			return
		}
	}
}

// start starts c placed per place and adds it to the fleet.
func (f *fleet) start(c *exec.Cmd, place Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	release, err := startPinned(c, place, f.log)
	if err != nil {
		return err
	}
	f.started = append(f.started, c)
	f.releases = append(f.releases, release)
	return nil
}

// abort stops every instance started so far and waits for them.
func (f *fleet) abort(why string) {
	f.signalAll(syscall.SIGTERM, why)
	for j, sc := range f.started {
		_ = sc.Wait()
		f.releases[j]()
	}
}

// wait waits for every instance and records in res how each ended.
func (f *fleet) wait(res *Result) {
	var wg sync.WaitGroup
	for i, c := range f.started {
		wg.Add(1)
		go func(i int, c *exec.Cmd, release func()) {
			defer wg.Done()
			err := c.Wait()
			release()
			r := &res.Instances[i]
			st, ok := c.ProcessState.Sys().(syscall.WaitStatus)
			switch {
			case ok && st.Signaled():
				r.ExitCode = 128 + int(st.Signal())
				r.Signal = st.Signal().String()
			case c.ProcessState != nil:
				r.ExitCode = c.ProcessState.ExitCode()
			}
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				r.Err = err.Error()
				r.ExitCode = max(r.ExitCode, 1)
			}
		}(i, c, f.releases[i])
	}
	wg.Wait()
}

// startPinned starts c from a fresh OS thread pinned to spec's CPUs and bound to its
// memory node: clone copies the calling thread's CPU mask and memory policy into the
// child, and execve keeps them, so the command never runs anywhere else. The thread is
// never unlocked, so the Go runtime retires it when the goroutine ends instead of
// reusing a thread with a narrowed mask; the goroutine lives until release is called
// (after c's Wait), because the child's parent-death signal fires when the thread that
// started it ends.
func startPinned(c *exec.Cmd, spec Spec, warn io.Writer) (release func(), err error) {
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := placeThread(spec, warn); err != nil {
			errc <- err
			return
		}
		err := c.Start()
		errc <- err
		if err == nil {
			<-done
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return sync.OnceFunc(func() { close(done) }), nil
}
