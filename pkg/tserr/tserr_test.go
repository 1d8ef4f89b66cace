package tserr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
)

func TestBadInputKeepsMessageAndChain(t *testing.T) {
	cause := &os.PathError{Op: "open", Path: "calib.npy", Err: os.ErrNotExist}
	err := fmt.Errorf("calibration data: %w", BadInput(cause))
	if err.Error() != "calibration data: open calib.npy: file does not exist" {
		t.Errorf("message %q: the class must not change it", err)
	}
	if !errors.Is(err, ErrBadInput) {
		t.Error("not ErrBadInput")
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Error("the cause's chain is lost")
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != "calib.npy" {
		t.Error("errors.As does not find the cause")
	}
	for _, other := range []error{ErrAccuracy, ErrInterrupted} {
		if errors.Is(err, other) {
			t.Errorf("bad input matches %q too", other)
		}
	}
	if BadInput(nil) != nil {
		t.Error("BadInput(nil) is not nil")
	}
	if e := BadInputf("model.name %q: %w", "a/b", os.ErrInvalid); !errors.Is(e, ErrBadInput) || !errors.Is(e, os.ErrInvalid) || e.Error() != `model.name "a/b": invalid argument` {
		t.Errorf("BadInputf: %v", e)
	}
}

func TestInterruptedIsContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fmt.Errorf("optimize interrupted: %w", ctx.Err()); !errors.Is(err, ErrInterrupted) {
		t.Errorf("a canceled context's error %v is not ErrInterrupted", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	if errors.Is(ctx.Err(), ErrInterrupted) {
		t.Error("a deadline counts as interrupted")
	}
}
