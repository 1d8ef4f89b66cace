package pipeline

import "fmt"

func (r *run) quantize() error {
	if r.cfg.Quantize.Mode == "none" {
		return nil
	}
	return fmt.Errorf("quantize.mode %s: INT8 is not wired into the pipeline in this build: set quantize.mode: none", r.cfg.Quantize.Mode)
}
