package exitcode

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/tserr"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, OK},
		{errors.New("x"), Failure},
		{Usagef("bad %s", "flag"), Usage},
		{fmt.Errorf("wrapped: %w", New(Validation, errors.New("thresholds"))), Validation},
		{fmt.Errorf("run: %w", context.Canceled), Interrupt},
		{fmt.Errorf("run: %w", context.DeadlineExceeded), Failure},
		// The library's classes (pkg/tserr) map to the documented codes...
		{fmt.Errorf("optimize: %w", tserr.BadInputf("model.name %q", "a/b")), Usage},
		{fmt.Errorf("optimize: %w", tserr.ErrAccuracy), Validation},
		{fmt.Errorf("optimize interrupted: %w", tserr.ErrInterrupted), Interrupt},
		// ...and the command's own choice, outside them, wins.
		{New(Failure, tserr.BadInputf("x")), Failure},
		{New(Usage, fmt.Errorf("a: %w", context.Canceled)), Usage},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if New(Usage, nil) != nil {
		t.Error("New(code, nil) is not nil")
	}
}
