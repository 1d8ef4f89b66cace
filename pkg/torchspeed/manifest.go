// Package torchspeed is the Go API for artifacts made by `torchspeed optimize`: Load opens one,
// re-applies the passes that cannot be saved, applies its runtime settings, and Predict runs it
// from many goroutines.
package torchspeed

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/runenv"
	"github.com/torchspeed/torchspeed/pkg/version"
)

// ManifestFile is the name of the extra file (extra/torchspeed.json inside the TorchScript
// archive) that carries the manifest. Stock libtorch ignores it.
const ManifestFile = "torchspeed.json"

// Load-time passes a manifest may list.
const (
	PassOptimizeForInference = "optimize_for_inference"
	// PassFreeze re-freezes a loaded frozen FP32 graph: serialization turns constant int lists
	// back into prim::ListConstruct nodes that run on every call; freezing folds them again.
	PassFreeze = "freeze"
	// PassFastQDQ swaps the graph's aten::quantize_per_tensor and aten::dequantize calls for
	// torchspeed's vectorized, parallel ops, which give the same tensors bit for bit (a libtorch
	// without FBGEMM runs ATen's as a scalar loop on one thread). Load applies it after every
	// other pass, wherever the list has it. Its result runs only where torchspeed's shim, or
	// its op library (torch.OpsLibraryName) in a stock libtorch process, is loaded: exports
	// save it into the served graph and ship that library.
	PassFastQDQ = "fast_qdq"
	// PassFastLinear swaps the graph's constant-weight linears (aten::linear, and the
	// aten::matmul + aten::add that optimize_for_inference leaves of one) for torchspeed's own
	// FP32 GEMM over weights packed at load time, fusing a following relu: the same values up to
	// float rounding. Load applies it after every other pass but fast_qdq. Like PassFastQDQ, its
	// result runs only where torchspeed's shim is loaded.
	PassFastLinear = "fast_linear"
	// PassLinearBF16, listed after PassFastLinear, gives torchspeed's GEMM the linears' weights
	// as BF16 and rounds their inputs to BF16 (products summed in float): vdpbf16ps where the CPU
	// has AVX512_BF16, the BF16 values widened to float on other AVX-512 and AVX2 CPUs, so one
	// artifact answers alike across a fleet. Lower precision than FP32: optimize offers it as a
	// variant that must pass validation against the original. Load applies it right after
	// PassFastLinear. Like PassFastQDQ, its result runs only where torchspeed's shim is loaded.
	PassLinearBF16 = "linear_bf16"
	// PassFastConv swaps the graph's 1-D and 2-D, ungrouped convolutions with constant weights for
	// torchspeed::conv2d_gemm (im2col, then PassFastLinear's GEMM over weights packed at load
	// time; output channels-last), and depthwise ones for torchspeed::conv_dw (a vectorized
	// loop), fusing a following relu, and a max_pool2d after that into torchspeed::conv2d_pool:
	// the same values up to float rounding.
	// Load applies it right after PassFastLinear. Like PassFastQDQ, its result runs only where
	// torchspeed's shim is loaded.
	PassFastConv = "fast_conv"
	// PassFuseConvAdd computes each quantized::conv2d whose only use is a quantized::add or
	// add_relu as one oneDNN convolution that adds into the other operand's buffer
	// (torchspeed::conv2d_add), where nothing reads that operand afterwards. Its outputs differ
	// from the unfused pair's by the conv's own u8 rounding (the optimize step validates the
	// artifact with it). Load applies it after every other pass but fast_qdq; a shim built
	// without it (no oneDNN 2 headers, or libtorch other than 1.13) leaves the graph unfused and
	// says so in the model's warnings. Like PassFastQDQ, its result runs only where torchspeed's
	// shim is loaded.
	PassFuseConvAdd = "fuse_conv_add"
)

// Manifest describes an artifact: what it was made from, how to load and run it, and how well
// it matched the original.
type Manifest struct {
	Format     int       `json:"format"`
	Torchspeed string    `json:"torchspeed_version"`
	Libtorch   string    `json:"libtorch_version"`
	Created    time.Time `json:"created"`
	// Source is the original model: its file name and SHA-256.
	SourceName   string      `json:"source_name"`
	SourceSHA256 string      `json:"source_sha256"`
	Inputs       []InputSpec `json:"inputs"`
	// LoadPasses are re-applied in order after loading (libtorch 1.13 cannot save the result of
	// optimize_for_inference).
	LoadPasses []string `json:"load_passes"`
	// ChannelsLast: 4-D float inputs are converted to channels-last before forward.
	ChannelsLast bool `json:"channels_last"`
	// Precision is "fp32", "bf16" (PassLinearBF16) or "int8-static" / "int8-dynamic".
	Precision string `json:"precision"`
	// QEngine is the quantized engine an INT8 artifact must run with.
	QEngine string `json:"qengine,omitempty"`
	// FP32Layers are the layers kept in FP32 by the accuracy fallback.
	FP32Layers []string `json:"fp32_layers,omitempty"`
	Runtime    Runtime  `json:"runtime"`
	// Validation holds the figures measured against the original when the artifact was made.
	Validation map[string]float64 `json:"validation,omitempty"`
	// Steps lists the optimization steps kept, in order.
	Steps []string `json:"steps"`

	// Method is the method Predict and Run call ("" means forward).
	Method string `json:"method,omitempty"`
	// Stateful: the method assigns attributes (StateAttributes, dotted paths), so the model
	// keeps state between calls; it was saved from a reset state (ResetMethod, "" if none).
	Stateful        bool     `json:"stateful,omitempty"`
	StateAttributes []string `json:"state_attributes,omitempty"`
	ResetMethod     string   `json:"reset_method,omitempty"`
	// PreserveMethods are kept through freezing (the reset method always is).
	PreserveMethods []string `json:"preserve_methods,omitempty"`
	// RecordsSHA256 is ArchiveDigest of the archive it was saved in (SaveArtifact); Load refuses
	// an archive whose records no longer match it. Empty in manifests written before it existed.
	RecordsSHA256 string `json:"records_sha256,omitempty"`
	// RecordSHA256 is the SHA-256 of each record RecordsSHA256 covers, by name inside the
	// archive ("constants.pkl", "data/0", "extra/vocab.txt"), so that Load can name what
	// changed. Absent in format 1 manifests, and for archives of more than MaxManifestList
	// records.
	RecordSHA256 map[string]string `json:"record_sha256,omitempty"`
	// ManifestSHA256 is the SHA-256 of this manifest's bytes as stored in the archive, with
	// this value itself read as 64 zeros (see manifestDigest): with RecordsSHA256 it puts every
	// byte torchspeed reads back under a digest. Required in format 2 manifests that record
	// RecordsSHA256.
	ManifestSHA256 string `json:"manifest_sha256,omitempty"`
	// CPU is the processor the artifact was optimized and measured on (nil in manifests of
	// older torchspeeds).
	CPU *CPU `json:"cpu,omitempty"`
	// ActivationBits is the width of an INT8 artifact's u8 activations: 7 (reduce_range),
	// which no x86 INT8 kernel can saturate, or 8, which oneDNN's and FBGEMM's kernels can
	// saturate on CPUs without VNNI. Dynamic INT8 linears always use 7 (libtorch's pass
	// hard-codes it); the setting reaches its LSTM and GRU cells. 0: FP32, or an older manifest.
	ActivationBits int `json:"activation_bits,omitempty"`
	// QuantizedOps counts the quantized:: operators in the saved graph, by kind (empty: no
	// layer is quantized, whatever Precision a hand-made manifest claims).
	QuantizedOps map[string]int `json:"quantized_ops,omitempty"`
}

// preserved are the methods a load-time freeze must keep.
func (m *Manifest) preserved() []string {
	keep := append([]string(nil), m.PreserveMethods...)
	if m.ResetMethod != "" && !slices.Contains(keep, m.ResetMethod) {
		keep = append(keep, m.ResetMethod)
	}
	return keep
}

// InputSpec is one argument of the method Predict and Run call. Older manifests list tensors
// only (Name, Shape, DType).
type InputSpec struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
	// Type is the TorchScript type ("Tensor", "int", "Optional[Tensor]", "List[Tensor]", ...);
	// "" means Tensor.
	Type string `json:"type,omitempty"`
	// Value is a constant's value as JSON (e.g. 16000 for sr: int): Predict passes it itself.
	Value json.RawMessage `json:"value,omitempty"`
	// BatchDim is the tensor's batch dimension (nil: 0); negative when it has none (recurrent
	// state, constants): batch sweeps leave such inputs alone.
	BatchDim *int `json:"batch_dim,omitempty"`
}

// Runtime is the setting the artifact was measured fastest with.
type Runtime struct {
	Threads        int    `json:"threads"`
	InteropThreads int    `json:"interop_threads"`
	OpenMP         string `json:"openmp,omitempty"`
	Allocator      string `json:"allocator,omitempty"`
	// Candidate names the runtime setting optimize measured fastest against libtorch's
	// defaults ("default" when none beat them; "" when not measured); WaitPolicy ("PASSIVE",
	// "ACTIVE" or "" for the OpenMP runtime's own) and SpinCount (GOMP_SPINCOUNT, with
	// PASSIVE) are its wait policy. `torchspeed bench` and `launch` apply them.
	Candidate  string `json:"candidate,omitempty"`
	WaitPolicy string `json:"wait_policy,omitempty"`
	SpinCount  int    `json:"spin_count,omitempty"`
	// HugePages: the allocator asks for transparent huge pages (glibc: GLIBC_TUNABLES
	// glibc.malloc.hugetlb=1; jemalloc: MALLOC_CONF thp:always). CPUCapability is
	// ATEN_CPU_CAPABILITY ("avx512"), BLASCore OPENBLAS_CORETYPE ("SkylakeX"). All absent in
	// manifests of older torchspeeds.
	HugePages     bool   `json:"huge_pages,omitempty"`
	CPUCapability string `json:"cpu_capability,omitempty"`
	BLASCore      string `json:"blas_core,omitempty"`
}

// Setting is the runtime candidate as runenv measures and applies it (the allocator by name:
// runenv.Candidate.Resolve finds its library on this machine).
func (r Runtime) Setting() runenv.Candidate {
	return runenv.Candidate{Name: r.Candidate, WaitPolicy: r.WaitPolicy, SpinCount: r.SpinCount, Allocator: r.Allocator,
		HugePages: r.HugePages, CPUCapability: r.CPUCapability, BLASCore: r.BLASCore}
}

// Marshal encodes the manifest for the archive.
func (m *Manifest) Marshal() ([]byte, error) { return json.MarshalIndent(m, "", "  ") }

// ParseManifest decodes a manifest and refuses formats newer than this build understands and
// fields torchspeed would not have written (a *ManifestError).
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("manifest %s: %d bytes, more than the %d a manifest can be", ManifestFile, len(b), MaxManifestBytes)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		var te *json.UnmarshalTypeError
		var pe *time.ParseError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return nil, &ManifestError{Field: te.Field, Err: fmt.Errorf("a JSON %s, where %s belongs", torch.Clip(te.Value), jsonKind(te.Type))}
		case errors.As(err, &pe):
			// encoding/json does not say which field a time came from: created is the one.
			return nil, &ManifestError{Field: "created", Err: fmt.Errorf("%s is not a time in RFC 3339 form", quote(pe.Value))}
		}
		return nil, fmt.Errorf("manifest %s: not valid JSON: %s", ManifestFile, torch.Clip(err.Error()))
	}
	if m.Format > version.ManifestFormat {
		return nil, fmt.Errorf("manifest format %d was written by torchspeed %s; this torchspeed (%s) reads format %d or older: upgrade torchspeed",
			m.Format, torch.Clip(m.Torchspeed), version.Version, version.ManifestFormat)
	}
	if m.Format < 1 {
		return nil, fmt.Errorf("manifest %s: format %d is not a torchspeed manifest", ManifestFile, m.Format)
	}
	if err := checkManifest(&m); err != nil {
		return nil, err
	}
	return &m, nil
}
