package pipeline

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Stop.Now waits for a commit in progress, removes the staging folder and the folders the run
// created, and no commit starts after it.
func TestStopWaitsForCommitAndCleansUp(t *testing.T) {
	base := t.TempDir()
	made := filepath.Join(base, "new", "out")
	stage := filepath.Join(made, stagingPrefix+"1-x")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "a.torchspeed.pt.tmp"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Stop{}
	s.track(&output{dir: made, created: []string{filepath.Join(base, "new"), made}})
	if !s.stage(stage, true) {
		t.Fatal("stopped before Now")
	}
	unlock, ok := s.commitLock()
	if !ok {
		t.Fatal("commit refused before Now")
	}
	stopped := make(chan struct{})
	go func() { s.Now(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Now did not wait for the commit")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	<-stopped
	if _, err := os.Stat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Errorf("the run's folders are still there: %v", err)
	}
	// A commit after Now never starts (the process exits meanwhile).
	started := make(chan bool, 1)
	go func() { _, ok := s.commitLock(); started <- ok }()
	select {
	case ok := <-started:
		if ok {
			t.Error("a commit started after Now")
		}
	case <-time.After(100 * time.Millisecond):
	}
}
