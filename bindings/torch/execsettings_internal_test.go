package torch

import "testing"

// Every combination of the four settings reads back as set on the same thread, and the
// thread-local ones stay on the thread that set them.
func TestExecSettingsRoundTrip(t *testing.T) {
	var before ExecSettings
	var err error
	Do(func() { before, err = execSettingsHere() })
	if err != nil {
		t.Fatal(err)
	}
	if before != DefaultExecSettings {
		t.Fatalf("settings before any change: %v, want libtorch's defaults %v", before, DefaultExecSettings)
	}
	defer Do(func() {
		if err := setExecSettingsHere(before); err != nil {
			t.Error(err)
		}
	})
	for i := range 16 {
		s := ExecSettings{OptimizedExecution: i&1 != 0, InferenceMode: i&2 != 0, JITExecutor: i&4 != 0, JITProfiling: i&8 != 0}
		var got, other ExecSettings
		var err, otherErr error
		Do(func() {
			if err = setExecSettingsHere(s); err == nil {
				got, err = execSettingsHere()
			}
		})
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		if got != s {
			t.Fatalf("set %v, read back %v", s, got)
		}
		// Another OS thread sees the process-wide settings but keeps its own thread-local ones.
		th := NewThread()
		if err := th.Do(func() { other, otherErr = execSettingsHere() }); err != nil {
			t.Fatal(err)
		}
		th.Close()
		if otherErr != nil {
			t.Fatal(otherErr)
		}
		want := ExecSettings{OptimizedExecution: true, InferenceMode: true, JITExecutor: s.JITExecutor, JITProfiling: s.JITProfiling}
		if other != want {
			t.Fatalf("after setting %v on the shared thread, another thread reads %v, want %v", s, other, want)
		}
	}
}
