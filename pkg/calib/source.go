// Package calib loads calibration and validation data for a model's inputs: NumPy
// .npy/.npz arrays, folders of JPEG/PNG images with torchvision-style preprocessing,
// or (only when asked) random data, which is flagged so reports can say the result
// is unverified.
//
// Open reads and checks everything up front (shapes and dtypes against the model's
// inputs, decodable images, finite values) so a bad data set fails before any model
// is touched or any file written; batches are then served from memory, which makes
// the repeated passes of calibration, validation and per-layer fallback cheap.
package calib

import (
	"fmt"
	"strings"
)

// Kinds of data source.
const (
	KindNPY    = "npy"
	KindNPZ    = "npz"
	KindImages = "images"
	KindRandom = "random"
)

// Defaults applied by Open when a field is left zero.
const (
	DefaultBatchSize     = 1
	DefaultRandomSamples = 32
	DefaultMaxMemoryMB   = 4096
)

// Source describes where calibration or validation data come from. It is meant to be
// embedded in the configuration file (mapstructure tags); zero values mean defaults.
//
// Paths: Inputs and Labels entries that are relative are taken relative to Path when
// Path is a directory, and as given otherwise.
type Source struct {
	// Kind is "npy", "npz", "images" or "random". Empty: inferred from Path (a .npy or
	// .npz file, or a directory holding images, .npy or .npz files).
	Kind string `mapstructure:"kind" json:"kind"`
	// Path is a file or directory, depending on Kind:
	//   npy:    an N x ... .npy file (one-input model); or a directory holding either
	//           <input name>.npy (N x ...) or <input name>/ (one .npy per sample) for each
	//           input, or, for a one-input model, one .npy per sample.
	//   npz:    an .npz with one N x ... member per input; or a directory of .npz files,
	//           one per sample.
	//   images: a directory of .jpg/.jpeg/.png files, or of class subdirectories
	//           (torchvision ImageFolder: classes sorted by name, label = index).
	Path string `mapstructure:"path" json:"path"`
	// Inputs names the data for each model input, in the model's input order: for npz
	// the member names; for npy the .npy files (N x ...) or directories (one .npy per
	// sample). Empty: matched by input name, or by order.
	Inputs []string `mapstructure:"inputs" json:"inputs"`
	// Labels gives integer class labels: a .npy file (N integers, in sample order), an
	// npz member name (default: the member "labels" if present), or for images a text
	// file with "<file> <label>" lines (or a .npy). ImageFolder layouts label
	// themselves.
	Labels string `mapstructure:"labels" json:"labels"`
	// Limit caps the number of samples (0: all; random: DefaultRandomSamples). A limit
	// smaller than the set picks samples evenly spread over it (index k*N/limit), so a
	// class-sorted set is still covered.
	Limit int `mapstructure:"limit" json:"limit"`
	// Sequence says the samples are an ordered stream of calls (a streaming model's chunks):
	// sample i along dimension 0 is call i's whole input, so a sample's shape is the input's
	// full shape (its batch dimension included). A limit keeps the first samples, in order;
	// batches hold one call each; users replay them from a reset state.
	Sequence bool `mapstructure:"sequence" json:"sequence,omitempty"`
	// BatchSize is the number of samples per batch (0: DefaultBatchSize). The last batch
	// may be smaller.
	BatchSize int `mapstructure:"batch_size" json:"batch_size"`
	// MaxMemoryMB refuses data sets whose decoded tensors exceed this (0:
	// DefaultMaxMemoryMB); lower Limit instead of running out of memory.
	MaxMemoryMB int `mapstructure:"max_memory_mb" json:"max_memory_mb"`

	Image  ImageOptions  `mapstructure:"image" json:"image"`
	Random RandomOptions `mapstructure:"random" json:"random"`

	// Progress, if set, is called as samples are loaded by Open: done of total. It may
	// be called from other goroutines than Open's, but never concurrently.
	Progress func(done, total int) `mapstructure:"-" json:"-" yaml:"-"`
}

// ImageOptions is the preprocessing applied to images, in torchvision's order:
// convert to RGB (or grayscale for 1-channel inputs), Resize (shorter side, bilinear
// with antialiasing), CenterCrop, scale to [0,1], Normalize(mean, std).
type ImageOptions struct {
	// Resize scales the shorter side to this many pixels, keeping the aspect ratio
	// (torchvision Resize(int)). 0: no resize.
	Resize int `mapstructure:"resize" json:"resize"`
	// CropSize takes a centered CropSize x CropSize crop (torchvision CenterCrop),
	// zero-padded if the image is smaller. 0: no crop.
	CropSize int `mapstructure:"crop_size" json:"crop_size"`
	// Mean and Std normalize each channel after scaling: (x*scale - mean) / std, one
	// value per output channel (in ColorOrder) or one for all. Default 0 and 1.
	Mean []float32 `mapstructure:"mean" json:"mean"`
	Std  []float32 `mapstructure:"std" json:"std"`
	// Scale multiplies the 0..255 pixel values before normalization. 0: divide by 255
	// (torchvision ToTensor). Use 1 for models that expect 0..255 (Caffe-style).
	Scale float32 `mapstructure:"scale" json:"scale"`
	// ColorOrder is "RGB" (default) or "BGR".
	ColorOrder string `mapstructure:"color_order" json:"color_order"`
	// Layout is "NCHW" (default) or "NHWC".
	Layout string `mapstructure:"layout" json:"layout"`
}

// RandomOptions describes synthetic data. It is used only with Kind "random".
type RandomOptions struct {
	// Dist is "normal" (default: mean 0, std 1) or "uniform" ([Low, High)).
	Dist string `mapstructure:"dist" json:"dist"`
	// Seed makes the data reproducible; the same seed gives the same data.
	Seed int64 `mapstructure:"seed" json:"seed"`
	// Low and High bound uniform floats (default [0, 1)) and integer inputs ([Low,
	// High), required for integer inputs: e.g. the vocabulary size for token ids).
	Low  float64 `mapstructure:"low" json:"low"`
	High float64 `mapstructure:"high" json:"high"`
	// PerInput overrides Dist, Low and High for the named model inputs, e.g.
	// {input_ids: {low: 0, high: 30522}, token_type_ids: {low: 0, high: 2}}.
	PerInput map[string]RandomRange `mapstructure:"per_input" json:"per_input"`
}

// RandomRange is the distribution for one input (see RandomOptions).
type RandomRange struct {
	Dist string  `mapstructure:"dist" json:"dist"`
	Low  float64 `mapstructure:"low" json:"low"`
	High float64 `mapstructure:"high" json:"high"`
}

// InputSpec is one model input as the data must match it.
type InputSpec struct {
	Name string
	// Shape is the full input shape including the batch dimension, which is dimension 0
	// and may be -1 or 0 (any). Other dimensions that are -1 or 0 are taken from the data
	// and must agree across samples.
	Shape []int64
	// DType is "float32", "float64", "int64", "int32", "int16", "int8", "uint8" or
	// "bool" (aliases such as "float", "long", "torch.int64" are accepted). Empty means
	// float32.
	DType string
}

// Validate checks the fields that do not depend on the files or the model, naming the
// key, the bad value and what is allowed.
func (s Source) Validate() error {
	switch s.Kind {
	case "", KindNPY, KindNPZ, KindImages, KindRandom:
	default:
		return fmt.Errorf("kind %q: want npy, npz, images or random", s.Kind)
	}
	if s.Kind != KindRandom && s.Kind != "" && s.Path == "" && !(s.Kind == KindNPY && len(s.Inputs) > 0) {
		return fmt.Errorf("path is empty: kind %s needs a file or directory", s.Kind)
	}
	if s.Kind == "" && s.Path == "" {
		return fmt.Errorf("path is empty: set path to the calibration data, or kind: random to use synthetic data")
	}
	if s.Limit < 0 {
		return fmt.Errorf("limit %d: want 0 (all) or a positive sample count", s.Limit)
	}
	if s.BatchSize < 0 {
		return fmt.Errorf("batch_size %d: want a positive number", s.BatchSize)
	}
	if s.Sequence && s.BatchSize > 1 {
		return fmt.Errorf("batch_size %d with sequence: true: a sequence is served one call per batch; leave batch_size out", s.BatchSize)
	}
	if s.MaxMemoryMB < 0 {
		return fmt.Errorf("max_memory_mb %d: want a positive number", s.MaxMemoryMB)
	}
	if err := s.Image.validate(); err != nil {
		return err
	}
	if s.Kind == KindRandom {
		if err := s.Random.validate(); err != nil {
			return err
		}
	}
	return nil
}

func (o ImageOptions) validate() error {
	if o.Resize < 0 {
		return fmt.Errorf("image.resize %d: want 0 (no resize) or a positive size", o.Resize)
	}
	if o.CropSize < 0 {
		return fmt.Errorf("image.crop_size %d: want 0 (no crop) or a positive size", o.CropSize)
	}
	switch strings.ToUpper(o.ColorOrder) {
	case "", "RGB", "BGR":
	default:
		return fmt.Errorf("image.color_order %q: want RGB or BGR", o.ColorOrder)
	}
	switch strings.ToUpper(o.Layout) {
	case "", "NCHW", "NHWC":
	default:
		return fmt.Errorf("image.layout %q: want NCHW or NHWC", o.Layout)
	}
	for _, s := range o.Std {
		if s == 0 || s != s {
			return fmt.Errorf("image.std %v: every value must be non-zero", o.Std)
		}
	}
	if o.Scale < 0 || o.Scale != o.Scale {
		return fmt.Errorf("image.scale %v: want a positive factor, or 0 for 1/255", o.Scale)
	}
	return nil
}

func (o RandomOptions) validate() error {
	if err := (RandomRange{o.Dist, o.Low, o.High}).validate("random."); err != nil {
		return err
	}
	for name, r := range o.PerInput {
		if err := r.validate("random.per_input." + name + "."); err != nil {
			return err
		}
	}
	return nil
}

func (r RandomRange) validate(key string) error {
	switch strings.ToLower(r.Dist) {
	case "", "normal", "uniform":
	default:
		return fmt.Errorf("%sdist %q: want normal or uniform", key, r.Dist)
	}
	if r.High < r.Low {
		return fmt.Errorf("%slow %v is above %shigh %v", key, r.Low, key, r.High)
	}
	return nil
}

// normalizeDType maps the spellings of model input dtypes people write to npy's names.
func normalizeDType(s string) (string, error) {
	switch strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "torch.") {
	case "", "float32", "float", "f32":
		return "float32", nil
	case "float64", "double", "f64":
		return "float64", nil
	case "int64", "long", "i64":
		return "int64", nil
	case "int32", "int", "i32":
		return "int32", nil
	case "int16", "short":
		return "int16", nil
	case "int8":
		return "int8", nil
	case "uint8", "u8", "byte":
		return "uint8", nil
	case "bool":
		return "bool", nil
	}
	return "", fmt.Errorf("dtype %q is not supported for calibration data (want float32, float64, int64, int32, int16, int8, uint8 or bool)", s)
}
