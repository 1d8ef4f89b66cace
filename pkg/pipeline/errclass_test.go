package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/torchspeed/torchspeed/internal/fixtures"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// A library user tells every failure class of Run apart with errors.Is on tserr's sentinels,
// and each error is of exactly one class.
func TestRunFailureClasses(t *testing.T) {
	f := fixtures.Load(t).Get(t, "digits")
	classes := []error{tserr.ErrBadInput, tserr.ErrAccuracy, tserr.ErrInterrupted}
	onlyClass := func(t *testing.T, err, want error) {
		t.Helper()
		t.Logf("error: %v", err)
		for _, c := range classes {
			if got := errors.Is(err, c); got != (c == want) {
				t.Errorf("errors.Is(err, %q) = %v: %v", c, got, err)
			}
		}
	}

	t.Run("bad input", func(t *testing.T) {
		cfg := quickConfig(t, f, t.TempDir())
		cfg.Model.Name = "sub/dir"
		_, err := Run(context.Background(), cfg, testOptions())
		onlyClass(t, err, tserr.ErrBadInput)
	})
	t.Run("accuracy", func(t *testing.T) {
		rep, err := Run(context.Background(), failingConfig(t, f, t.TempDir()), testOptions())
		onlyClass(t, err, tserr.ErrAccuracy)
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Failures) == 0 || rep == nil {
			t.Errorf("no *ValidationError with failures and a report: %v", err)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Run(ctx, quickConfig(t, f, t.TempDir()), testOptions())
		onlyClass(t, err, tserr.ErrInterrupted)
	})
}
