package torch_test

import (
	"testing"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/internal/zerocheck"
)

// Every exported method of every handle refuses a nil or zero-value receiver with an error
// (ErrNilHandle), or answers a zero result where it returns no error; none panics.
func TestHostileZeroValueHandles(t *testing.T) {
	t.Run("Module", func(t *testing.T) { zerocheck.Receivers[torch.Module](t, "Close") })
	t.Run("Tensor", func(t *testing.T) { zerocheck.Receivers[torch.Tensor](t, "Close") })
	t.Run("Value", func(t *testing.T) { zerocheck.Receivers[torch.Value](t, "Close", "Err") })
	t.Run("Thread", func(t *testing.T) { zerocheck.Receivers[torch.Thread](t, "Close") })
}
