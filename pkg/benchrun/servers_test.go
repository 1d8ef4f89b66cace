package benchrun

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func fakeServers(n int, env ...string) []ServerSpec {
	var specs []ServerSpec
	for i := range n {
		specs = append(specs, ServerSpec{Name: "server " + string(rune('a'+i)), Argv: []string{"/bin/sh", "-c", fakeServe},
			Env: append(append(os.Environ(), "TORCHSPEED_INSTANCE="+strconv.Itoa(i)), env...)})
	}
	return specs
}

// procState is a process's state letter from /proc (T: stopped).
func procState(t *testing.T, pid int) string {
	t.Helper()
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The command name may hold spaces: the state follows its closing parenthesis.
	s := string(st)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// stopped waits up to 5 s for a process to be stopped: a signal takes effect shortly after
// kill returns.
func stopped(t *testing.T, pid int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if procState(t, pid) == "T" {
			return true
		}
	}
	return false
}

// Servers take turns: each is stopped except in its own turn; MeasureRounds gives each its
// timed latencies, without the warm-up ones, for every round.
func TestServersTakeTurns(t *testing.T) {
	ctx := context.Background()
	s, err := StartServers(ctx, fakeServers(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Ready) != 3 || s.Ready[2]["instance"] != "2" {
		t.Fatalf("ready %v", s.Ready)
	}
	for i, c := range s.g.children {
		if !stopped(t, c.cmd.Process.Pid) {
			t.Errorf("server %d runs between turns, want it stopped", i)
		}
	}
	var done []int
	lat, err := MeasureRounds(ctx, s, RoundsOptions{Rounds: 4, Warmup: 2, Runs: 3, Seed: 7, Progress: func(d, n int) { done = append(done, d) }})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lat {
		if len(l) != 4*3 {
			t.Errorf("server %d: %d latencies, want 12", i, len(l))
		}
		for _, d := range l {
			if d != time.Duration(1000+i) {
				t.Errorf("server %d: latency %v from another server", i, d)
			}
		}
	}
	if len(done) != 4 || done[3] != 4 {
		t.Errorf("progress %v", done)
	}
	for i, c := range s.g.children {
		if !stopped(t, c.cmd.Process.Pid) {
			t.Errorf("server %d runs after the rounds, want it stopped", i)
		}
	}
	if line, err := s.Ask(ctx, 1, "run 2"); err != nil || line != "ns 1001 1001" {
		t.Errorf("ask: %q %v", line, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// A server that fails names itself and its stderr, and every server is stopped.
func TestServersFailures(t *testing.T) {
	ctx := context.Background()
	if _, err := StartServers(ctx, fakeServers(2, "FAKE_START=exit 3"), nil); err == nil || !strings.Contains(err.Error(), "bench: server ") || !strings.Contains(err.Error(), "exit status 3) before it was ready") {
		t.Errorf("start: %v", err)
	}
	if _, err := StartServers(ctx, []ServerSpec{{Name: "x", Argv: []string{"/nonexistent/serve"}}}, nil); err == nil || !strings.Contains(err.Error(), "start x") {
		t.Errorf("missing command: %v", err)
	}
	if _, err := StartServers(ctx, nil, nil); err == nil {
		t.Error("no servers: no error")
	}
	s, err := StartServers(ctx, fakeServers(2, "FAKE_RUN=eval echo error forward failed; exit 1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = MeasureRounds(ctx, s, RoundsOptions{Rounds: 2, Runs: 1})
	if err == nil || !strings.Contains(err.Error(), "forward failed") {
		t.Errorf("failed round: %v", err)
	}
	if _, err := MeasureRounds(ctx, s, RoundsOptions{Rounds: 0, Runs: 1}); err == nil {
		t.Error("0 rounds: no error")
	}
}
