package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/torchspeed/torchspeed/pkg/runenv"
)

// startServe runs `torchspeed serve` on a free loopback port and returns the process, its base
// URL and its stderr so far (read on).
func startServe(t *testing.T, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	bin := torchspeedBin(t)
	cmd := exec.Command(bin, append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	log := &syncBuffer{}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			log.WriteString(line + "\n")
			if u, ok := strings.CutPrefix(line, "listening on "); ok {
				urls <- u
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("serve exited before listening:\n%s", log)
		}
		return cmd, u, log
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not listen in 60 s:\n%s", log)
	}
	return nil, "", nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(v)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// SIGTERM in the middle of a load: requests sent before it are answered (200, or 503 once the
// drain began), later ones are refused, and the process exits 0.
func TestCLIServeDrainsOnSIGTERM(t *testing.T) {
	art := measuredArtifact(t, runenv.Candidate{Name: "default"})
	cmd, url, log := startServe(t, "-m", art, "--name", "digits", "--instances", "1")
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url + "/v2/models/digits")
	if err != nil {
		t.Fatal(err)
	}
	md, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(md), `"shape":[-1,1,8,8]`) {
		t.Fatalf("metadata: %d %s", resp.StatusCode, md)
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "x", "shape": []int{1, 1, 8, 8}, "datatype": "FP32", "data": make([]float32, 64)}}})

	type answer struct {
		sent, got time.Time
		code      int
		err       error
	}
	var mu sync.Mutex
	var answers []answer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 5000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				a := answer{sent: time.Now()}
				resp, err := c.Post(url+"/v2/models/digits/infer", "application/json", bytes.NewReader(body))
				a.err = err
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					a.code = resp.StatusCode
				}
				a.got = time.Now()
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				if err != nil {
					return // the server is gone
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after SIGTERM:\n%s", log)
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatalf("serve exited with %v after SIGTERM, want 0:\n%s", werr, log)
	}
	count := map[int]int{}
	drained := 0
	for _, a := range answers {
		switch {
		case a.sent.Before(signalled) && (a.err != nil || (a.code != 200 && a.code != 503)):
			t.Errorf("a request sent before SIGTERM got %d, %v", a.code, a.err)
		case a.err == nil && a.code != 200 && a.code != 503:
			t.Errorf("a request got %d", a.code)
		}
		if a.err == nil && a.code == 200 && a.got.After(signalled) {
			drained++
		}
		count[a.code]++
	}
	t.Logf("answers by status (0: refused after the drain): %v; %d answered 200 after SIGTERM\n%s", count, drained, log)
	if count[200] == 0 || !strings.Contains(log.String(), "serve: drained") {
		t.Errorf("no successful answers, or no drain logged")
	}
}

func TestCLIServeUsage(t *testing.T) {
	bin := torchspeedBin(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve"}, "--model (-m) is required"},
		{[]string{"serve", "-m", "/nonexistent.pt"}, `model "/nonexistent.pt"`},
		{[]string{"serve", "-m", digits(t), "--name", "a/b"}, `model name "a/b"`},
		{[]string{"serve", "-m", digits(t), "--instances", "-1"}, "instances -1"},
	} {
		_, stderr, code := runBin(t, bin, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%v: exit %d %q, want 2 with %q", tc.args, code, stderr, tc.msg)
		}
	}
}
