package exitcode

import (
	"context"
	"errors"
	"fmt"
	"testing"
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
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if New(Usage, nil) != nil {
		t.Error("New(code, nil) is not nil")
	}
}
