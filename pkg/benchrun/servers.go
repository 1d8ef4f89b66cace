package benchrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"
)

// ServerSpec is one serve process for StartServers: a program that speaks ServeRounds'
// protocol (`torchspeed bench --serve ...`), started with its own environment. Settings the
// OpenMP runtime or the dynamic loader read at start (OMP_WAIT_POLICY, GOMP_SPINCOUNT,
// LD_PRELOAD) differ only between processes: serving each in its own process and taking
// turns is how they are compared in one run.
type ServerSpec struct {
	// Name says which setting the server runs, in messages ("runtime candidate passive").
	Name string
	// Argv is the command and its arguments; Env its whole environment.
	Argv []string
	Env  []string
}

// Servers are serve processes that take turns: each is stopped (SIGSTOP) except while it
// measures, so none is timed next to another's spinning OpenMP or BLAS workers, and every
// one idles alike between its turns.
type Servers struct {
	g *group
	// Ready holds each server's settings, as it reported them when ready.
	Ready []map[string]string
}

// StartServers starts every server (or none), waits until each has loaded its model and
// warmed up, and stops them all. Close them when done. stderr receives their stderr lines,
// each prefixed with the server's name (nil: discarded; the last lines still go into errors).
func StartServers(ctx context.Context, specs []ServerSpec, stderr io.Writer) (*Servers, error) {
	if len(specs) == 0 {
		return nil, errors.New("bench: servers: none to start")
	}
	for _, sp := range specs {
		if len(sp.Argv) == 0 {
			return nil, fmt.Errorf("bench: server %q: no command", sp.Name)
		}
	}
	s := &Servers{g: &group{stderr: orDiscard(stderr)}}
	err := s.g.start(func() error {
		for _, sp := range specs {
			if err := s.g.spawnOne(sp.Name, sp.Argv, sp.Env); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.g.stop()
		return nil, err
	}
	lines, err := s.g.readAll(ctx, "before it was ready")
	if err != nil {
		s.g.stop()
		return nil, err
	}
	s.Ready = make([]map[string]string, len(lines))
	for i, line := range lines {
		raw, ok := strings.CutPrefix(line, "ready ")
		if !ok {
			return nil, s.g.childErr(i, fmt.Errorf("want \"ready {settings}\", got %q", line))
		}
		if err := json.Unmarshal([]byte(raw), &s.Ready[i]); err != nil {
			return nil, s.g.childErr(i, fmt.Errorf("ready settings %q: %v", raw, err))
		}
	}
	for i := range s.g.children {
		if err := s.signal(i, syscall.SIGSTOP); err != nil {
			s.g.stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *Servers) signal(i int, sig syscall.Signal) error {
	c := s.g.children[i]
	if err := syscall.Kill(-c.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("bench: %s (pid %d): signal %v: %w", c.what, c.cmd.Process.Pid, sig, err)
	}
	return nil
}

// Ask continues server i, sends it line and returns its answer line, then stops it again.
// An answer "error ..." is returned as it came; a server that ends or does not answer is an
// error that carries the end of its stderr (and every server is stopped).
func (s *Servers) Ask(ctx context.Context, i int, line string) (string, error) {
	if i < 0 || i >= len(s.g.children) {
		return "", fmt.Errorf("bench: server %d of %d", i, len(s.g.children))
	}
	if s.g.stopped {
		return "", errors.New("bench: servers already closed")
	}
	c := s.g.children[i]
	if err := s.signal(i, syscall.SIGCONT); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		return "", s.g.childErr(i, fmt.Errorf("send %q: %v", line, err))
	}
	got := make(chan struct {
		text string
		err  error
	}, 1)
	go func() {
		t, err := c.out.ReadString('\n')
		got <- struct {
			text string
			err  error
		}{strings.TrimSpace(t), err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return "", s.g.childErr(i, fmt.Errorf("%w before answering %q", s.g.exitReason(i, r.err), line))
		}
		// A server that answered and then ended (after an "error" line) is not there to stop;
		// the next turn reports how it ended.
		if err := s.signal(i, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return "", err
		}
		return r.text, nil
	case <-ctx.Done():
		s.g.stop()
		return "", ctx.Err()
	}
}

// Turn has server i time warmup+runs inferences and returns the last runs latencies: the
// first ones after a pause pay for waking the cores and refilling the caches another process
// used, which a process serving steadily does not.
func (s *Servers) Turn(ctx context.Context, i, warmup, runs int) ([]time.Duration, error) {
	k := warmup + runs
	if runs < 1 || warmup < 0 {
		return nil, fmt.Errorf("bench: turn of %d warm-up and %d timed runs", warmup, runs)
	}
	line, err := s.Ask(ctx, i, fmt.Sprintf("run %d", k))
	if err != nil {
		return nil, err
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return nil, s.g.childErr(i, errors.New(msg))
	}
	lat, err := ParseAnswer(line, k)
	if err != nil {
		return nil, s.g.childErr(i, err)
	}
	return lat[warmup:], nil
}

// Close asks every server to quit and waits for them (killing those that do not within 30
// s). It is idempotent.
func (s *Servers) Close() error {
	if s.g.stopped {
		return nil
	}
	for i := range s.g.children {
		_ = s.signal(i, syscall.SIGCONT)
	}
	return s.g.quit()
}

// RoundsOptions shape MeasureRounds.
type RoundsOptions struct {
	// Rounds is the number of rounds; in each, every server takes one turn of Warmup untimed
	// and Runs timed inferences.
	Rounds, Warmup, Runs int
	// Seed draws each round's order of turns.
	Seed uint64
	// Progress, if set, hears each finished round.
	Progress func(done, total int)
}

// MeasureRounds has the servers take turns, in a new shuffled order every round (so that no
// server always follows the same one), and returns each server's timed latencies, in the
// order taken.
func MeasureRounds(ctx context.Context, s *Servers, o RoundsOptions) ([][]time.Duration, error) {
	if o.Rounds < 1 || o.Runs < 1 || o.Warmup < 0 {
		return nil, fmt.Errorf("bench: rounds %d, runs %d, warm-up %d: want rounds and runs >= 1, warm-up >= 0", o.Rounds, o.Runs, o.Warmup)
	}
	n := len(s.g.children)
	out := make([][]time.Duration, n)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	for r := 0; r < o.Rounds; r++ {
		rng.Shuffle(n, func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			lat, err := s.Turn(ctx, i, o.Warmup, o.Runs)
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], lat...)
		}
		if o.Progress != nil {
			o.Progress(r+1, o.Rounds)
		}
	}
	return out, nil
}
