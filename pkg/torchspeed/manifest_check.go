package torchspeed

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// A manifest comes from a file anyone can write, and its fields end up in shell exports
// (`launch --print-env`), environment variables, server configs and messages: every field is
// checked against what torchspeed itself writes before anything uses it.

// ManifestError is a manifest field that torchspeed would never have written: Field is its
// JSON path ("runtime.candidate", "inputs[2].name").
type ManifestError struct {
	Field string
	Err   error
}

func (e *ManifestError) Error() string {
	return fmt.Sprintf("manifest field %s: %v: the file was not written by torchspeed or was modified; run torchspeed optimize again", e.Field, e.Err)
}

func (e *ManifestError) Unwrap() error { return e.Err }

// Bounds on manifest fields: far above what optimize writes, low enough that no value can
// grow a message, an environment or a server config without bound.
const (
	// MaxManifestString bounds a free-form string (versions, labels, layer names).
	MaxManifestString = 4096
	// MaxManifestName bounds a name (an input, a method, a runtime setting).
	MaxManifestName = 256
	// MaxManifestList bounds every list and map of a manifest.
	MaxManifestList = 4096
	// MaxManifestThreads bounds runtime.threads and runtime.interop_threads; counts above the
	// CPUs of the machine at hand (but within this) are clamped there with a warning.
	MaxManifestThreads = 1 << 16
	// MaxManifestSpinCount bounds runtime.spin_count (GOMP_SPINCOUNT).
	MaxManifestSpinCount = math.MaxInt32
	// maxManifestRank bounds the rank of an input's shape.
	maxManifestRank = 64
)

// The values of the enumerated runtime fields: what optimize writes (pkg/runenv's candidates
// and settings). A name torchspeed does not know cannot be applied, and must not reach a shell.
var (
	// ManifestCandidates are the runtime candidates a manifest may name.
	ManifestCandidates = []string{"default", "passive-short-spin", "passive", "active", "jemalloc", "tcmalloc",
		"jemalloc-thp", "thp", "avx512", "openblas-avx512"}
	manifestWaitPolicies    = []string{"", "PASSIVE", "ACTIVE"}
	manifestOpenMPs         = []string{"", "gnu", "intel", "llvm"}
	manifestAllocators      = []string{"", "default", "jemalloc", "tcmalloc"}
	manifestCPUCapabilities = []string{"", "default", "avx2", "avx512"}
	manifestBLASCores       = []string{"", "Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}
	manifestQEngines        = []string{"", "onednn", "qnnpack", "fbgemm", "x86", "none"}
)

// checkManifest checks every field of m; the error is a *ManifestError.
func checkManifest(m *Manifest) error {
	var c checker
	c.text("torchspeed_version", m.Torchspeed, MaxManifestName)
	c.text("libtorch_version", m.Libtorch, MaxManifestName)
	c.text("source_name", m.SourceName, MaxManifestString)
	c.digest("source_sha256", m.SourceSHA256)
	c.digest("records_sha256", m.RecordsSHA256)
	c.digest("manifest_sha256", m.ManifestSHA256)
	c.list("record_sha256", len(m.RecordSHA256))
	for _, k := range sortedKeys(m.RecordSHA256) {
		c.text("record_sha256 key", k, MaxManifestString)
		c.digest("record_sha256."+torch.Clip(k), m.RecordSHA256[k])
	}
	c.text("precision", m.Precision, MaxManifestName)
	c.oneOf("qengine", m.QEngine, manifestQEngines)
	c.list("inputs", len(m.Inputs))
	for i, in := range m.Inputs {
		f := fmt.Sprintf("inputs[%d]", i)
		c.text(f+".name", in.Name, MaxManifestName)
		c.text(f+".type", in.Type, MaxManifestName)
		if in.DType != "" {
			if _, err := torch.ParseDType(in.DType); err != nil {
				c.fail(f+".dtype", fmt.Errorf("%s is not a dtype: want float32, float64, int64, int32, uint8 or bool", quote(in.DType)))
			}
		}
		if len(in.Shape) > maxManifestRank {
			c.fail(f+".shape", fmt.Errorf("rank %d: at most %d dimensions", len(in.Shape), maxManifestRank))
		}
		if len(in.Value) > MaxManifestString {
			c.fail(f+".value", fmt.Errorf("%d bytes: at most %d", len(in.Value), MaxManifestString))
		}
		if in.BatchDim != nil && (*in.BatchDim >= maxManifestRank || *in.BatchDim < -maxManifestRank) {
			c.fail(f+".batch_dim", fmt.Errorf("%d: want -%d to %d", *in.BatchDim, maxManifestRank, maxManifestRank-1))
		}
	}
	c.names("load_passes", m.LoadPasses)
	c.names("fp32_layers", m.FP32Layers)
	c.names("steps", m.Steps)
	c.list("validation", len(m.Validation))
	for _, k := range sortedKeys(m.Validation) {
		c.text("validation key", k, MaxManifestName)
	}
	c.list("quantized_ops", len(m.QuantizedOps))
	for _, k := range sortedKeys(m.QuantizedOps) {
		c.text("quantized_ops key", k, MaxManifestName)
		if n := m.QuantizedOps[k]; n < 0 {
			c.fail("quantized_ops."+torch.Clip(k), fmt.Errorf("%d: a count is 0 or more", n))
		}
	}
	c.ident("method", m.Method)
	c.ident("reset_method", m.ResetMethod)
	c.list("state_attributes", len(m.StateAttributes))
	for i, a := range m.StateAttributes {
		c.ident(fmt.Sprintf("state_attributes[%d]", i), a)
	}
	c.list("preserve_methods", len(m.PreserveMethods))
	for i, a := range m.PreserveMethods {
		c.ident(fmt.Sprintf("preserve_methods[%d]", i), a)
	}

	rt := m.Runtime
	c.count("runtime.threads", rt.Threads, MaxManifestThreads)
	c.count("runtime.interop_threads", rt.InteropThreads, MaxManifestThreads)
	c.count("runtime.spin_count", rt.SpinCount, MaxManifestSpinCount)
	c.oneOf("runtime.openmp", rt.OpenMP, manifestOpenMPs)
	c.oneOf("runtime.allocator", rt.Allocator, manifestAllocators)
	if rt.Candidate != "" {
		c.candidate("runtime.candidate", rt.Candidate)
	}
	c.oneOf("runtime.wait_policy", rt.WaitPolicy, manifestWaitPolicies)
	c.oneOf("runtime.cpu_capability", rt.CPUCapability, manifestCPUCapabilities)
	c.oneOf("runtime.blas_core", rt.BLASCore, manifestBLASCores)
	if m.ActivationBits != 0 && m.ActivationBits != 7 && m.ActivationBits != 8 {
		c.fail("activation_bits", fmt.Errorf("%d: want 7, 8, or absent", m.ActivationBits))
	}
	if cpu := m.CPU; cpu != nil {
		c.text("cpu.vendor", cpu.Vendor, MaxManifestName)
		c.text("cpu.model", cpu.Model, MaxManifestName)
		c.count("cpu.cores", cpu.Cores, MaxManifestThreads)
		c.list("cpu.features", len(cpu.Features))
		for i, f := range cpu.Features {
			c.oneOf(fmt.Sprintf("cpu.features[%d]", i), f, KernelFeatures)
		}
	}
	return c.err
}

// checker keeps the first failure.
type checker struct{ err error }

func (c *checker) fail(field string, err error) {
	if c.err == nil {
		c.err = &ManifestError{Field: field, Err: err}
	}
}

// text checks a string that may be printed: valid UTF-8, no control characters, at most max
// bytes.
func (c *checker) text(field, s string, max int) {
	if len(s) > max {
		c.fail(field, fmt.Errorf("%d bytes, more than the %d allowed", len(s), max))
		return
	}
	if err := printable(s); err != nil {
		c.fail(field, err)
	}
}

// printable refuses what a terminal or a shell would interpret: invalid UTF-8, control
// characters (newline, NUL, escape) and Unicode's line and paragraph separators.
func printable(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", quote(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("%s holds the control character %U", quote(s), r)
		}
	}
	return nil
}

func (c *checker) names(field string, list []string) {
	c.list(field, len(list))
	for i, s := range list {
		c.text(fmt.Sprintf("%s[%d]", field, i), s, MaxManifestString)
	}
}

func (c *checker) list(field string, n int) {
	if n > MaxManifestList {
		c.fail(field, fmt.Errorf("%d entries, more than the %d allowed", n, MaxManifestList))
	}
}

func (c *checker) count(field string, n, max int) {
	if n < 0 || n > max {
		c.fail(field, fmt.Errorf("%d: want 0 to %d", n, max))
	}
}

func (c *checker) oneOf(field, s string, allowed []string) {
	if slices.Contains(allowed, s) {
		return
	}
	var named []string
	for _, a := range allowed {
		if a == "" {
			a = `"" (unset)`
		}
		named = append(named, a)
	}
	c.fail(field, fmt.Errorf("%s is not one this torchspeed knows: want %s (or upgrade torchspeed, if a newer one wrote it)", quote(s), strings.Join(named, ", ")))
}

// candidate checks a runtime candidate's name: a known one, or known ones joined by "+" (the
// winners of different kinds of setting combined, as runenv.Combine names them).
func (c *checker) candidate(field, name string) {
	parts := strings.Split(name, "+")
	if len(name) <= MaxManifestName && len(parts) <= 4 && !slices.ContainsFunc(parts, func(p string) bool { return !slices.Contains(ManifestCandidates, p) }) {
		return
	}
	c.fail(field, fmt.Errorf("%s is not one this torchspeed knows: want one of %s, or up to 4 of them joined by + (or upgrade torchspeed, if a newer one wrote it)", quote(name), strings.Join(ManifestCandidates, ", ")))
}

// digest checks a SHA-256 in hex ("" when not recorded).
func (c *checker) digest(field, s string) {
	if s == "" {
		return
	}
	if _, err := hex.DecodeString(s); err != nil || len(s) != 64 {
		c.fail(field, fmt.Errorf("%s is not a SHA-256 (64 hex digits)", quote(s)))
	}
}

// ident checks a TorchScript method or attribute path ("" when absent): letters, digits, '_'
// and '.' between names.
func (c *checker) ident(field, s string) {
	if s == "" {
		return
	}
	if len(s) > MaxManifestName {
		c.fail(field, fmt.Errorf("%d bytes, more than the %d allowed", len(s), MaxManifestName))
		return
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || !isIdent(part) {
			c.fail(field, errors.New(quote(s)+" is not a TorchScript name (letters, digits and _, dots between names)"))
			return
		}
	}
}

func isIdent(s string) bool {
	for i, r := range s {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// quote writes a value from a manifest for a message: clipped, with every control character
// escaped.
func quote(s string) string { return fmt.Sprintf("%q", torch.Clip(s)) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonKind names what a field of Go type t holds, for a message about a JSON value that does
// not fit it.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("a whole number from %d to %d", minInt(t.Bits()), maxInt(t.Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

func maxInt(bits int) int64 { return int64(1)<<(bits-1) - 1 }
func minInt(bits int) int64 { return -maxInt(bits) - 1 }
