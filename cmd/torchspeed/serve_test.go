package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/torchspeed/torchspeed/pkg/runenv"
	pb "github.com/torchspeed/torchspeed/pkg/serve/inferencepb"
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
			if u, ok := strings.CutPrefix(line, "listening on "); ok && strings.HasPrefix(u, "http://") {
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
		{[]string{"serve", "-m", digits(t), "--grpc", "9000"}, `--grpc "9000": not host:port`},
		{[]string{"serve", "-m", digits(t), "--http", "127.0.0.1:99999"}, `port "99999"`},
	} {
		_, stderr, code := runBin(t, bin, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%v: exit %d %q, want 2 with %q", tc.args, code, stderr, tc.msg)
		}
	}
}

// grpcAddrOf is the address serve's log says it serves gRPC on.
func grpcAddrOf(t *testing.T, log *syncBuffer) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, line := range strings.Split(log.String(), "\n") {
			if a, ok := strings.CutPrefix(line, "listening on grpc://"); ok {
				return a
			}
		}
	}
	t.Fatalf("serve never said it listens for gRPC:\n%s", log)
	return ""
}

// SIGTERM in the middle of a gRPC load: calls made before it are answered (OK, or UNAVAILABLE
// once the drain began), none is lost or cut, and the process exits 0.
func TestCLIServeGRPCDrainsOnSIGTERM(t *testing.T) {
	art := measuredArtifact(t, runenv.Candidate{Name: "default"})
	cmd, _, log := startServe(t, "-m", art, "--name", "digits", "--instances", "1", "--grpc", "127.0.0.1:0")
	conn, err := grpc.NewClient(grpcAddrOf(t, log), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "digits"}); err != nil || len(md.Inputs) != 1 || !slices.Equal(md.Inputs[0].Shape, []int64{-1, 1, 8, 8}) {
		t.Fatalf("ModelMetadata: %v %v", md, err)
	}
	req := &pb.ModelInferRequest{ModelName: "digits", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 1, 8, 8}, Contents: &pb.InferTensorContents{Fp32Contents: make([]float32, 64)}},
	}}
	type answer struct {
		sent time.Time
		code codes.Code
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 5000; n++ {
				a := answer{sent: time.Now()}
				_, err := c.ModelInfer(ctx, req)
				a.code = status.Code(err)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				if err != nil {
					return
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
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after SIGTERM:\n%s", log)
	}
	wg.Wait()
	if err != nil {
		t.Fatalf("serve exited with %v after SIGTERM, want 0:\n%s", err, log)
	}
	count := map[codes.Code]int{}
	for _, a := range answers {
		if a.sent.Before(signalled) && a.code != codes.OK && a.code != codes.Unavailable {
			t.Errorf("a call made before SIGTERM got %v", a.code)
		}
		count[a.code]++
	}
	t.Logf("answers by code: %v\n%s", count, log)
	if count[codes.OK] == 0 || !strings.Contains(log.String(), "serve: drained") {
		t.Errorf("no successful answers, or no drain logged")
	}
}
