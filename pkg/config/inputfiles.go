package config

import (
	"fmt"

	"github.com/torchspeed/torchspeed/internal/safefile"
	"github.com/torchspeed/torchspeed/pkg/calib"
)

// InputFiles lists every file the config reads (itself, the model, input data, calibration
// and validation data and labels), each named by its key, so that a command can refuse an
// output that would replace one of them.
func (c *Config) InputFiles() []safefile.Named {
	var out []safefile.Named
	add := func(what, path string) {
		if path != "" {
			out = append(out, safefile.Named{What: what, Path: path})
		}
	}
	add("the config", c.File)
	add("model.path", c.Model.Path)
	for i, in := range c.Model.Inputs {
		if in.Data == "" {
			continue
		}
		if src, err := ParseSource(in.Data); err == nil {
			out = append(out, SourceFiles(fmt.Sprintf("model.inputs[%d].data", i), src)...)
		}
	}
	for _, s := range []struct {
		key string
		src calib.Source
	}{{"calibration", c.Calibration}, {"validation.data", c.Validation.Data}} {
		add(s.key+".path", s.src.Path)
		add(s.key+".labels", s.src.Labels)
		for i, p := range s.src.Inputs {
			add(fmt.Sprintf("%s.inputs[%d]", s.key, i), p)
		}
	}
	return out
}

// SourceFiles lists the files a value (as --input or model.inputs[].data take it) reads.
func SourceFiles(what string, src Source) []safefile.Named {
	switch src.Kind {
	case SourceFile:
		return []safefile.Named{{What: what, Path: src.Path}}
	case SourceList:
		var out []safefile.Named
		for _, it := range src.Items {
			out = append(out, SourceFiles(what, it)...)
		}
		return out
	}
	return nil
}
