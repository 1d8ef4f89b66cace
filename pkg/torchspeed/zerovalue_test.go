package torchspeed

import (
	"testing"

	"github.com/torchspeed/torchspeed/internal/zerocheck"
)

// Every exported method of Model and Session refuses a nil or zero-value receiver with an
// error, or answers a zero result where it returns no error; none panics.
func TestHostileZeroValueHandles(t *testing.T) {
	t.Run("Model", func(t *testing.T) { zerocheck.Receivers[Model](t, "Close") })
	t.Run("Session", func(t *testing.T) { zerocheck.Receivers[Session](t, "Close") })
}
