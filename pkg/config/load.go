package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/torchspeed/torchspeed/internal/safefile"
)

// MaxConfigBytes bounds a config file: a config is a few kilobytes.
const MaxConfigBytes = 1 << 20

// Load reads a config file (empty path: defaults only), applies TORCHSPEED_* environment
// variables and the flags the user set, and validates the result. Flags are bound by their
// names as dotted keys (e.g. a flag named "runtime.threads"), or through aliases: flag name ->
// key.
func Load(path string, flags *pflag.FlagSet, aliases map[string]string) (*Config, error) {
	return LoadValues(path, flags, aliases, true)
}

// LoadValues is Load for commands that take the model or its inputs from elsewhere (bench
// reads them from flags or an artifact's manifest): with full false, model.path and
// model.inputs may be missing, and every value given is still checked.
func LoadValues(path string, flags *pflag.FlagSet, aliases map[string]string, full bool) (*Config, error) {
	var text []byte
	if path != "" {
		// Bounded: a config given as /dev/zero (or a pipe that never ends) once grew the
		// process until the kernel killed it.
		b, err := safefile.ReadFileLimit(path, MaxConfigBytes)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("config %q: file not found: check the path, or write one with `torchspeed config init -m MODEL`", path)
			}
			return nil, fmt.Errorf("config %q: %w", path, err)
		}
		text = b
	}
	return loadValues(path, text, flags, aliases, full)
}

// loadValues is LoadValues with the file's text (nil without a file) read already.
func loadValues(path string, text []byte, flags *pflag.FlagSet, aliases map[string]string, full bool) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	def := Default()
	var keys []string
	setDefaults(v, "", reflect.ValueOf(def), &keys)
	if path != "" {
		if err := checkYAMLSize(text); err != nil {
			return nil, fmt.Errorf("config %q: %w", path, err)
		}
		if err := v.ReadConfig(bytes.NewReader(text)); err != nil {
			return nil, fmt.Errorf("config %q: not valid YAML: %w", path, err)
		}
	}
	changed := map[string]bool{}
	if flags != nil {
		var bindErr error
		flags.VisitAll(func(fl *pflag.Flag) {
			key := fl.Name
			if k, ok := aliases[fl.Name]; ok {
				key = k
			} else if !strings.Contains(key, ".") {
				return
			}
			if err := v.BindPFlag(key, fl); err != nil && bindErr == nil {
				bindErr = err
			}
			if fl.Changed {
				changed[key] = true
			}
		})
		if bindErr != nil {
			return nil, bindErr
		}
	}
	cfg := def
	dc := func(c *mapstructure.DecoderConfig) {
		c.ErrorUnused = true
		c.WeaklyTypedInput = true
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			wholeNumberHook,
			toggleHook,
		)
	}
	if err := v.Unmarshal(&cfg, dc); err != nil {
		return nil, fmt.Errorf("config %s: %s", orDefaults(path), explainDecode(err, v))
	}
	cfg.File = path
	cfg.given = map[string]bool{}
	typed := map[string]bool{} // set by a flag or a variable: relative to the working folder
	for _, k := range keys {
		if changed[k] || os.Getenv(EnvName(k)) != "" {
			typed[k] = true
		}
		if typed[k] || v.InConfig(k) {
			cfg.given[k] = true
		}
	}
	cfg.resolvePaths(typed)
	validate := cfg.Validate
	if !full {
		validate = cfg.ValidateValues
	}
	if err := validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", orDefaults(path), err)
	}
	return &cfg, nil
}

// wholeNumberHook refuses a number with a fraction, or one beyond int64, for an integer key:
// mapstructure would truncate threads: 1.5 to 1, and YAML reads 99999999999999999999 as a
// float that converts to -9223372036854775808.
func wholeNumberHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	if to == reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	var f float64
	switch v := data.(type) {
	case float64:
		f = v
	case float32:
		f = float64(v)
	default:
		return data, nil
	}
	if f != math.Trunc(f) || math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return nil, fmt.Errorf("%v is not a whole number in range: give an integer", data)
	}
	return int64(f), nil
}

// toggleHook reads YAML's booleans as the Toggle values they spell: `fast_qdq: false` is a
// bool to the YAML parser, and the weakly typed decoding would turn it into "0", which
// Validate then refused ("0 is not allowed: auto, true or false").
func toggleHook(from, to reflect.Type, data any) (any, error) {
	if b, ok := data.(bool); ok && to == reflect.TypeOf(Toggle("")) {
		if b {
			return On, nil
		}
		return Off, nil
	}
	return data, nil
}

func orDefaults(path string) string {
	if path == "" {
		return "(flags and defaults)"
	}
	return fmt.Sprintf("%q", path)
}

// setDefaults registers every leaf key, so environment variables reach keys the file lacks.
func setDefaults(v *viper.Viper, prefix string, val reflect.Value, keys *[]string) {
	t := val.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("mapstructure"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		fv := val.Field(i)
		if fv.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			setDefaults(v, key, fv, keys)
			continue
		}
		if fv.Kind() == reflect.Func {
			continue
		}
		v.SetDefault(key, fv.Interface())
		*keys = append(*keys, key)
	}
}

// explainDecode turns mapstructure's messages into ones that name the key and what is allowed.
func explainDecode(err error, v *viper.Viper) string {
	msg := err.Error()
	quoted := regexp.MustCompile(`'([a-z0-9_.\[\]]+)'`)
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
		if l == "" || strings.HasPrefix(l, "decoding failed due to") || strings.HasSuffix(l, "error(s) decoding:") {
			continue
		}
		if strings.Contains(l, "has invalid keys:") {
			l += " (a typo? see configs/ for the keys each section takes)"
		} else if m := quoted.FindStringSubmatch(l); m != nil && v.IsSet(m[1]) {
			l = fmt.Sprintf("%s: got %q", l, fmt.Sprint(v.Get(m[1])))
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return msg
	}
	return strings.Join(lines, "; ")
}

// resolvePaths makes paths in the file relative to the file's folder. A path given by a flag
// or a TORCHSPEED_* variable (a key in typed) stays as typed, relative to the working folder:
// `-c configs/x.yaml -m model.pt` means ./model.pt, not configs/model.pt.
func (c *Config) resolvePaths(typed map[string]bool) {
	if c.File == "" {
		return
	}
	base := filepath.Dir(c.File)
	rel := func(key string, p *string) {
		if *p != "" && !filepath.IsAbs(*p) && !typed[key] {
			*p = filepath.Join(base, *p)
		}
	}
	rel("model.path", &c.Model.Path)
	rel("calibration.path", &c.Calibration.Path)
	rel("validation.data.path", &c.Validation.Data.Path)
	rel("output.dir", &c.Output.Dir)
	if !typed["model.op_libraries"] {
		for i, l := range c.Model.OpLibraries {
			// A bare name is one the dynamic linker searches for, unless the file is here.
			if _, err := os.Stat(filepath.Join(base, l)); strings.ContainsRune(l, '/') || err == nil {
				rel("model.op_libraries", &c.Model.OpLibraries[i])
			}
		}
	}
	c.rebaseData(base)
	// Labels may be an npz member name; only file paths are made relative to the config.
	for key, l := range map[string]*string{"calibration.labels": &c.Calibration.Labels, "validation.data.labels": &c.Validation.Data.Labels} {
		if strings.ContainsRune(*l, '/') || strings.HasSuffix(*l, ".npy") || strings.HasSuffix(*l, ".txt") {
			rel(key, l)
		}
	}
}
