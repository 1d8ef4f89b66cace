package benchrun

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/pkg/cpu"
	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// fakeTrampoline skips launch's trampoline arguments and execs the command, without pinning:
// these tests check the driver, not the placement (cmd/torchspeed's tests run the real one).
var fakeTrampoline = []string{"/bin/sh", "-c", `while [ "$1" != "--" ]; do shift; done; shift; exec "$@"`, "trampoline"}

// fakeServe speaks ServeRounds' protocol: it reports affinity $FAKE_AFFINITY (default 0) and
// one thread, answers "run K" with K latencies of 1000+instance ns, and does what $FAKE_START
// says before it is ready and $FAKE_RUN before each answer.
const fakeServe = `
echo "fake serve $TORCHSPEED_INSTANCE starting" >&2
$FAKE_START
echo "ready {\"affinity\":\"${FAKE_AFFINITY:-0}\",\"threads\":\"1\",\"instance\":\"$TORCHSPEED_INSTANCE\",\"input-shape\":\"4x3,2\"}"
while read cmd k; do
	case $cmd in
	run)
		$FAKE_RUN
		printf ns; i=0; while [ $i -lt $k ]; do printf ' %d' $((1000 + TORCHSPEED_INSTANCE)); i=$((i+1)); done; echo ;;
	quit) exit 0 ;;
	esac
done
`

// syncBuffer is a bytes.Buffer safe from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func fakeInstances(n int, env ...string) (InstancesConfig, *syncBuffer) {
	var settings []runenv.Settings
	for i := range n {
		settings = append(settings, runenv.Settings{Instance: i, Instances: n, CPUs: cpu.CPUSet{0}, Threads: 1, NUMANode: 0,
			Vars: []runenv.Var{{Name: "TORCHSPEED_INSTANCE", Value: strconv.Itoa(i)}}})
	}
	log := &syncBuffer{}
	return InstancesConfig{
		Name:       "fake",
		Settings:   settings,
		Trampoline: fakeTrampoline,
		Command:    func(int) []string { return []string{"/bin/sh", "-c", fakeServe} },
		Env:        append(os.Environ(), env...),
		Runs:       5,
		Stderr:     log,
		Log:        log,
	}, log
}

var pidRE = regexp.MustCompile(`pid (\d+)`)

// checkGone fails unless every instance pid the log names has ended (a zombie has).
func checkGone(t *testing.T, log string) {
	t.Helper()
	ms := pidRE.FindAllStringSubmatch(log, -1)
	if len(ms) == 0 {
		t.Fatalf("no instance pids in the log:\n%s", log)
	}
	for _, m := range ms {
		st, err := os.ReadFile("/proc/" + m[1] + "/stat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] != "Z" {
			t.Errorf("instance pid %s still runs: %s", m[1], st)
		}
	}
}

func TestRunInstances(t *testing.T) {
	cfg, log := fakeInstances(2)
	res, err := RunInstances(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	tr := res.Throughput
	if tr.Name != "fake" || tr.Streams != 2 || tr.Threads != 1 || tr.Batch != 4 || tr.Inferences != 10 || len(tr.PerStream) != 2 {
		t.Fatalf("result %+v", tr)
	}
	for i, s := range tr.PerStream {
		if s.Stream != i || s.Runs != 5 || len(s.Samples) != 5 || s.Samples[0] != time.Duration(1000+i) {
			t.Errorf("instance %d: %+v", i, s)
		}
	}
	if tr.Latency.N != 10 || tr.PerSecond <= 0 || tr.ItemsPerSecond != 4*tr.PerSecond || tr.Elapsed <= 0 {
		t.Errorf("pooled %+v, %.1f/s, %.1f items/s over %v", tr.Latency, tr.PerSecond, tr.ItemsPerSecond, tr.Elapsed)
	}
	if len(res.Ready) != 2 || res.Ready[1]["instance"] != "1" {
		t.Errorf("ready %v", res.Ready)
	}
	if !strings.Contains(log.String(), "instance 1: fake serve 1 starting") {
		t.Errorf("stderr not passed on with a prefix:\n%s", log)
	}
	checkGone(t, log.String())
}

func TestRunInstancesFailures(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"exits before ready", []string{"FAKE_START=exit 3"}, []string{"instance ", "exit status 3", "before it was ready", "fake serve"}},
		{"dies in the round", []string{"FAKE_RUN=exit 4"}, []string{"exit status 4", `before answering "run 5"`}},
		{"error line", []string{"FAKE_RUN=eval echo error forward failed; exit 1"}, []string{"forward failed"}},
		{"wrong affinity", []string{"FAKE_AFFINITY=0-7"},
			[]string{`runs on CPUs "0-7", was given 0`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, log := fakeInstances(2, c.env...)
			_, err := RunInstances(context.Background(), cfg)
			if err == nil {
				t.Fatalf("no error\n%s", log)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			checkGone(t, log.String())
		})
	}
}

// A cancelled run (SIGINT in the CLI) kills the instances mid-round, and what they started.
func TestRunInstancesCancel(t *testing.T) {
	cfg, log := fakeInstances(2, "FAKE_RUN=sleep 300")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !strings.Contains(log.String(), "ready;") {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	_, err := RunInstances(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled\n%s", err, log)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to stop", d)
	}
	checkGone(t, log.String())
}

func TestRunInstancesStartFails(t *testing.T) {
	cfg, _ := fakeInstances(2)
	cfg.Trampoline = []string{"/nonexistent/trampoline"}
	if _, err := RunInstances(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "start instance 0") {
		t.Errorf("error %v", err)
	}
}

func TestParseAnswer(t *testing.T) {
	if d, err := ParseAnswer("ns 5 7", 2); err != nil || len(d) != 2 || d[1] != 7 {
		t.Errorf("%v %v", d, err)
	}
	for _, bad := range []string{"ns 5", "ns 5 x", "ns 5 -1", "ready {}", ""} {
		if _, err := ParseAnswer(bad, 2); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]int{"4x3x224x224": 4, "8,1x16": 8, "": 1, "x": 1} {
		if got := batchOf(in); got != want {
			t.Errorf("batchOf(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestTailWriter(t *testing.T) {
	var out bytes.Buffer
	w := &tailWriter{w: &out, prefix: "i: "}
	for i := range 12 {
		w.Write([]byte("line " + strconv.Itoa(i) + "\n"))
	}
	w.Write([]byte("part"))
	if got := w.tail(); !strings.HasPrefix(got, "line 4\n") || !strings.HasSuffix(got, "line 11\npart") {
		t.Errorf("tail %q", got)
	}
	if !strings.HasPrefix(out.String(), "i: line 0\ni: line 1\n") {
		t.Errorf("passed on %q", out.String())
	}
}
