package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/torchspeed/torchspeed/pkg/calib"
)

// CheckFiles checks that every file the config names is there: the model, the calibration
// and validation data, each input's data file and each op library given as a path. They are
// what the user typed, so a missing one is found before any model work rather than after
// minutes of timing candidates.
func (c *Config) CheckFiles() error {
	var errs []error
	check := func(key, path, what string, dir bool) {
		if path == "" {
			return
		}
		if err := checkPath(path, dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %s", key, err, what))
		}
	}
	check("model.path", c.Model.Path, "check the path, or export the model with torch.jit.save", false)
	for i, l := range c.Model.OpLibraries {
		// A bare name is one the dynamic linker searches for, not a path to stat.
		if strings.ContainsRune(l, '/') {
			check(fmt.Sprintf("model.op_libraries[%d]", i), l, "check the path, or build the library first", false)
		}
	}
	for i, in := range c.Model.Inputs {
		src, err := ParseSource(in.Data)
		if in.Data == "" || err != nil {
			continue // Validate names a malformed source
		}
		items := []Source{src}
		if src.Kind == SourceList {
			items = src.Items
		}
		for _, s := range items {
			if s.Kind == SourceFile {
				check(fmt.Sprintf("model.inputs[%d].data", i), s.Path, "check the path (a .npy or .npz file)", false)
			}
		}
	}
	if c.Calibration.Kind != calib.KindRandom {
		check("calibration.path", c.Calibration.Path, "check the path (a .npy or .npz file, or a folder of samples or images)", true)
	}
	if c.Validation.Data.Kind != calib.KindRandom {
		check("validation.data.path", c.Validation.Data.Path, "check the path (a .npy or .npz file, or a folder of samples or images)", true)
	}
	return errors.Join(errs...)
}

// checkPath reports whether path is a readable file (or, when dir, a file or a folder).
func checkPath(path string, dir bool) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%q: file not found", path)
	case err != nil:
		return fmt.Errorf("%q: %v", path, err)
	case fi.IsDir() && !dir:
		return fmt.Errorf("%q is a folder, not a file", path)
	}
	if !fi.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("%q: cannot be read: %v", path, err)
		}
		f.Close()
	}
	return nil
}
