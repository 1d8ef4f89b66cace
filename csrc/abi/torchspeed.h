/*
 * torchspeed.h: the C ABI over libtorch used by torchspeed's Go bindings.
 *
 * Conventions (after ONNX Runtime's C API):
 *  - Every fallible function returns ts_status*; NULL means success. A non-NULL status carries a
 *    message and must be released with ts_status_free.
 *  - No C++ exception ever crosses this boundary: each body runs inside TS_API_BEGIN/TS_API_END.
 *  - Out-parameters are written only on success, as the last statement.
 *  - Handles are opaque. Each has a ts_X_free that accepts NULL.
 *  - "borrowed": the callee does not take ownership and keeps no reference after returning.
 *    "new reference": the caller owns the result and must free it.
 *  - Strings returned through char** are new references, released with ts_free.
 *  - A changed signature or behaviour gets a new name (_v2). A function is removed only when
 *    nothing calls it (the Go bindings check TS_API_VERSION, so they never meet a shim without
 *    a function they call); the version bump lists it.
 *  - Test-only entry points live in csrc/testing/ts_testing.h and libtorchspeed_testing.so,
 *    neither installed: this library exports none of them.
 *  - Every function is noexcept. A NULL handle or out-parameter gives TS_CODE_INVALID_ARGUMENT
 *    ("op: NAME is NULL"); functions without a status return a neutral value (0, -1, "").
 *  - Thread safety: the version, status and free functions are safe from any thread. A ts_tensor
 *    and a ts_module are safe to read from many threads at once (every function taking a const
 *    handle), but not while another thread calls a function taking the same handle non-const
 *    (ts_module_eval, _define, _define_ops, _channels_last) or frees it: callers serialize those.
 *    A module whose methods set attributes (RNN state) must not run on two threads at once.
 *    Process-wide settings (threads, quantized engine) are safe to call from any thread but
 *    change every thread's behaviour: ts_set_qengine must not race with a load or a conversion
 *    that depends on the engine (the Go bindings hold one mutex around both).
 */
#ifndef TORCHSPEED_H_
#define TORCHSPEED_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TS_BUILDING_SHIM)
#define TS_EXPORT __attribute__((visibility("default")))
#else
#define TS_EXPORT
#endif
#define TS_MUST_CHECK __attribute__((warn_unused_result))
#ifdef __cplusplus
#define TS_NOEXCEPT noexcept
#else
#define TS_NOEXCEPT
#endif

/* Bumped whenever a function is added or removed. The Go side refuses a shim older than it expects.
 * 7: ts_status_code/_op/_reason/_errno, ts_max_file_format_version, noexcept everywhere, ts_manual_seed removed.
 * 8: ts_value, ts_module_call(_kw), ts_module_methods, ts_module_method_schema, ts_module_state.
 * 9: ts_quant_convert_v2, ts_quant_dynamic_v2 (methods preserved through finalizing).
 * 10: ts_exec_settings, ts_exec_settings_get/_set.
 * 11: ts_worker (forward handed to a serving thread in one call), ts_outputs_take_all.
 * 12: ts_set_handoff_spin, ts_get_handoff_spin.
 * 13: ts_module_forward_single.
 * 14: ts_module_fast_qdq, ts_tensor_quantize_per_tensor, ts_tensor_dequantize.
 * 15: ts_module_fast_linear, ts_tensor_linear, ts_tensor_linear_pack, ts_tensor_linear_packed.
 * 16: ts_module_fast_qdq_v2 (also swaps quantized::add/add_relu, counts them), ts_tensor_qadd.
 * 17: ts_module_fuse_conv_add, ts_conv_add_unavailable, ts_tensor_qconv2d_add.
 * 18: ts_module_fast_conv, ts_tensor_conv2d.
 * 19: ts_measure_gaps.
 * 20: ts_set_num_threads_here.
 * 21: ts_module_clone_state, ts_load_library.
 * 22: ts_module_op_profile.
 * 23: removed the test hooks ts_tensor_quantize_per_tensor, _dequantize, _qadd, _linear,
 *     _linear_pack, _linear_packed, _conv2d, _qconv2d_add (now ts_test_* in ts_testing.h), and
 *     ts_module_fast_qdq (its behaviour had changed to _v2's), ts_quant_convert and
 *     ts_quant_dynamic (no caller; use the _v2 functions).
 * 24: ts_module_serve_mkldnn, ts_mkldnn_serve_unavailable, ts_module_channels_last_inputs.
 * 25: ts_module_call_single.
 * 26: ts_module_linear_bf16.
 * 27: ts_op_profile_begin, ts_op_profile_end. */
#define TS_API_VERSION 27

typedef struct ts_status ts_status;
typedef struct ts_module ts_module;
typedef struct ts_tensor ts_tensor;
typedef struct ts_outputs ts_outputs;

/* Tensor element types. Codes are stable across versions. */
enum {
  TS_FLOAT32 = 0,
  TS_FLOAT64 = 1,
  TS_INT64 = 2,
  TS_INT32 = 3,
  TS_UINT8 = 4,
  TS_BOOL = 5,
  TS_INT8 = 6,
  TS_INT16 = 7,
  TS_FLOAT16 = 8,
  TS_BFLOAT16 = 9,
  TS_QUINT8 = 10,
  TS_QINT8 = 11,
  TS_QINT32 = 12
};

/* What kind of failure a status reports. Callers branch on these, never on message text. */
enum {
  TS_CODE_OK = 0,
  TS_CODE_INVALID_ARGUMENT = 1, /* NULL, out of range or malformed argument (shape, dtype, config) */
  TS_CODE_NOT_FOUND = 2,        /* a named method, extra file, engine or submodule does not exist */
  TS_CODE_OUT_OF_MEMORY = 3,
  TS_CODE_MODEL_ERROR = 4,      /* the model's code or libtorch's checks failed compiling or running it */
  TS_CODE_UNSUPPORTED = 5,      /* valid, but not something this libtorch build or the shim can do */
  TS_CODE_IO = 6,               /* reading or writing a file failed */
  TS_CODE_CORRUPT = 7,          /* a damaged, truncated or non-TorchScript archive */
  TS_CODE_INTERNAL = 8          /* anything else */
};

/* ---- status and memory (csrc/abi/common.cpp) ---- */
TS_EXPORT int32_t ts_status_code(const ts_status* s) TS_NOEXCEPT; /* a TS_CODE_*; TS_CODE_OK for NULL */
TS_EXPORT const char* ts_status_op(const ts_status* s) TS_NOEXCEPT; /* the operation, e.g. "load"; borrowed */
TS_EXPORT const char* ts_status_reason(const ts_status* s) TS_NOEXCEPT; /* the message without "op: "; borrowed */
TS_EXPORT int32_t ts_status_errno(const ts_status* s) TS_NOEXCEPT; /* TS_CODE_IO: the failed call's errno, else 0 */
TS_EXPORT const char* ts_status_message(const ts_status* s) TS_NOEXCEPT; /* "op: reason"; borrowed, valid until free */
TS_EXPORT void ts_status_free(ts_status* s) TS_NOEXCEPT;
TS_EXPORT void ts_free(void* p) TS_NOEXCEPT; /* frees strings and arrays this library returned */

/* ---- versions and runtime (csrc/abi/runtime.cpp) ---- */
TS_EXPORT int32_t ts_api_version(void) TS_NOEXCEPT;
TS_EXPORT const char* ts_libtorch_version(void) TS_NOEXCEPT; /* static string, e.g. "1.13.1" */
TS_EXPORT ts_status* ts_show_config(char** out) TS_NOEXCEPT TS_MUST_CHECK;        /* at::show_config() */
TS_EXPORT ts_status* ts_parallel_info(char** out) TS_NOEXCEPT TS_MUST_CHECK;      /* at::get_parallel_info() */
/* Sets the calling thread's count and libtorch's process-wide one (at::set_num_threads, which
 * threads that start later take; called only when that count changes, since it also restarts
 * libtorch's pthreadpool) and, when the process has OpenBLAS (Debian's libtorch calls it for
 * float matmul), OpenBLAS's own thread count too: at::set_num_threads leaves it at every CPU,
 * and its pthreads pool then spins beside libtorch's threads. */
TS_EXPORT ts_status* ts_set_num_threads(int32_t n) TS_NOEXCEPT TS_MUST_CHECK; /* sets the calling OS thread's count */
/* Sets the calling OS thread's count alone (OpenMP's, and OpenBLAS's process-wide one), not
 * libtorch's process-wide count: for loops that switch counts block by block, where
 * at::set_num_threads would start a new pthreadpool of spinning threads each time. */
TS_EXPORT ts_status* ts_set_num_threads_here(int32_t n) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT int32_t ts_get_num_threads(void) TS_NOEXCEPT;
/* The BLAS library found in the process, as JSON: {"library":"openblas","config":
 * "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64","threading":"pthreads",
 * "threads":2}, or {"library":""} when no BLAS with a query API is loaded (MKL linked
 * statically into libtorch is reported by ts_show_config instead). Since API version 6. */
TS_EXPORT ts_status* ts_blas_info(char** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Inter-op threads can be set once, before any inter-op work; later calls fail with a message. */
TS_EXPORT ts_status* ts_set_num_interop_threads(int32_t n) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT int32_t ts_get_num_interop_threads(void) TS_NOEXCEPT;
/* Comma-separated names of the quantized engines this build supports, e.g. "none,onednn,qnnpack". */
TS_EXPORT ts_status* ts_supported_qengines(char** out) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_get_qengine(char** out) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_set_qengine(const char* name /* borrowed */) TS_NOEXCEPT TS_MUST_CHECK;
/* The newest TorchScript file format version (an archive's "version" record) this libtorch
 * reads: caffe2::serialize::kMaxSupportedFileFormatVersion. */
TS_EXPORT int64_t ts_max_file_format_version(void) TS_NOEXCEPT;

/* ---- tensors (csrc/abi/shim.cpp, as are modules and outputs) ---- */
/* Copies nbytes from data (borrowed) into a new contiguous CPU tensor of the given shape. */
TS_EXPORT ts_status* ts_tensor_new(const void* data, size_t nbytes, int32_t dtype, const int64_t* shape,
                                   size_t ndim, ts_tensor** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT void ts_tensor_free(ts_tensor* t) TS_NOEXCEPT;
TS_EXPORT int32_t ts_tensor_dtype(const ts_tensor* t) TS_NOEXCEPT;
TS_EXPORT size_t ts_tensor_ndim(const ts_tensor* t) TS_NOEXCEPT;
/* Writes min(ndim, cap) sizes into shape. */
TS_EXPORT void ts_tensor_shape(const ts_tensor* t, int64_t* shape, size_t cap) TS_NOEXCEPT;
TS_EXPORT int64_t ts_tensor_numel(const ts_tensor* t) TS_NOEXCEPT;
/* Copies the elements, in row-major order, into dst (borrowed, nbytes long). Quantized tensors
 * copy their integer representation. */
TS_EXPORT ts_status* ts_tensor_copy_to(const ts_tensor* t, void* dst, size_t nbytes) TS_NOEXCEPT TS_MUST_CHECK;
/* Quantization parameters of a quantized tensor. Per-tensor: *nscales = 1. Per-channel: the
 * arrays are new references of length *n and *axis >= 0. */
TS_EXPORT ts_status* ts_tensor_qparams(const ts_tensor* t, double** scales, int64_t** zero_points, size_t* n,
                                       int64_t* axis) TS_NOEXCEPT TS_MUST_CHECK;
/* Dequantizes a quantized tensor, or returns a float32 copy of any other. */
TS_EXPORT ts_status* ts_tensor_to_float(const ts_tensor* t, ts_tensor** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* A copy in channels-last memory format (4-D) or channels-last-3d (5-D); same values. */
TS_EXPORT ts_status* ts_tensor_channels_last(const ts_tensor* t, ts_tensor** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;

/* ---- modules ---- */
/* Loads a shared library of custom operators (a TORCH_LIBRARY extension) with dlopen(RTLD_NOW |
 * RTLD_GLOBAL), before the models that use its operators are loaded. path (borrowed) is a file
 * (with a slash) or a name dlopen searches for. A missing file is TS_CODE_NOT_FOUND; a file
 * dlopen refuses (not a library, a missing dependency or symbol) TS_CODE_INVALID_ARGUMENT with
 * dlerror's text. Loading one library twice is harmless. */
TS_EXPORT ts_status* ts_load_library(const char* path) TS_NOEXCEPT TS_MUST_CHECK;
/* Loads a TorchScript archive. All extra files in the archive (extra/NAME) are read and kept
 * on the handle; see ts_module_extra_file. */
TS_EXPORT ts_status* ts_module_load(const char* path /* borrowed */, ts_module** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_module_load_bytes(const void* data /* borrowed */, size_t len,
                                          ts_module** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT void ts_module_free(ts_module* m) TS_NOEXCEPT;
/* Saves the module with extra files: names[i] -> contents[i] of lens[i] bytes (all borrowed). */
TS_EXPORT ts_status* ts_module_save(const ts_module* m, const char* path, const char* const* names,
                                    const char* const* contents, const size_t* lens, size_t n) TS_NOEXCEPT TS_MUST_CHECK;
/* Newline-separated names of the extra files read at load time. */
TS_EXPORT ts_status* ts_module_extra_names(const ts_module* m, char** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Contents of one extra file; *out is a new reference of *len bytes (not NUL-terminated). */
TS_EXPORT ts_status* ts_module_extra_file(const ts_module* m, const char* name, char** out, size_t* len) TS_NOEXCEPT TS_MUST_CHECK;
/* A deep copy that shares no parameters with m (libtorch's Module::deepcopy). Its memo matches
 * tensors by storage, so weights that are views of one buffer (an LSTM's flattened weights)
 * come back wrong: for a stream's own state use ts_module_clone_state. */
TS_EXPORT ts_status* ts_module_clone(const ts_module* m, ts_module** out) TS_NOEXCEPT TS_MUST_CHECK;
/* A copy of m (borrowed) that shares its parameters, code and every attribute but the n named
 * ones (dotted paths, borrowed: ts_module_state's list), which it copies: one stream's state.
 * Unlike ts_module_clone it copies no weights, and it keeps weights that are views of one
 * storage (an LSTM's flattened weights) intact, which libtorch's deepcopy mangles. A path that
 * names no attribute is TS_CODE_NOT_FOUND. *out is a new reference. */
TS_EXPORT ts_status* ts_module_clone_state(const ts_module* m, const char* const* attrs, size_t n,
                                           ts_module** out) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_module_eval(ts_module* m) TS_NOEXCEPT TS_MUST_CHECK;
/* torch::jit::freeze; preserved attribute names are borrowed. Returns a new module. */
TS_EXPORT ts_status* ts_module_freeze(const ts_module* m, const char* const* preserved, size_t n,
                                      ts_module** out) TS_NOEXCEPT TS_MUST_CHECK;
/* torch::jit::FoldConvBatchNorm on an unfrozen module (what quantize_jit does first). */
TS_EXPORT ts_status* ts_module_fold_conv_bn(const ts_module* m, ts_module** out) TS_NOEXCEPT TS_MUST_CHECK;
/* torch::jit::optimize_for_inference (freezes first when needed). Returns a new module. Its
 * result cannot be saved and loaded back on libtorch 1.13. */
TS_EXPORT ts_status* ts_module_optimize_for_inference(const ts_module* m, ts_module** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Converts every 4-D (5-D) parameter and buffer to channels-last in place. *converted gets the
 * number of tensors changed. Run before freezing: a frozen module's weights are constants. */
TS_EXPORT ts_status* ts_module_channels_last(ts_module* m, int64_t* converted) TS_NOEXCEPT TS_MUST_CHECK;
/* A clone whose graphs (every method of the module and its submodules) call
 * torchspeed::linear_packed (csrc/kernels/fastlinear.cpp: a register-blocked FP32 GEMM over a weight
 * packed here) where they called aten::linear with a constant weight (and constant or no bias),
 * or aten::matmul with a constant 2-D right operand, optionally followed by an aten::add of a
 * constant bias (alpha 1) that is its only use (what optimize_for_inference leaves of a linear);
 * a relu that is the only use of the result is fused. aten::_transformer_encoder_layer_fwd with
 * constant weights (a scripted nn.TransformerEncoderLayer's eval fast path) becomes
 * torchspeed::transformer_encoder_layer (csrc/kernels/fastencoder.cpp), its four linears through the same
 * kernel. *linears gets how many linears were swapped (four per encoder layer), *relus how many
 * of them took a relu. Same values up to float rounding (the sum runs in another
 * order). Nothing is swapped on a CPU without AVX2 and FMA. The result runs only where
 * libtorchspeed is loaded: do not save it for stock PyTorch. */
TS_EXPORT ts_status* ts_module_fast_linear(const ts_module* m, ts_module** out, int64_t* linears,
                                           int64_t* relus) TS_NOEXCEPT TS_MUST_CHECK;
/* A clone of a module ts_module_fast_linear made whose torchspeed::linear_packed and
 * torchspeed::transformer_encoder_layer nodes take BF16 panels of their weights (rounded to nearest
 * even) in place of FP32 ones; the ops then round x to BF16 too and sum the products in float:
 * with vdpbf16ps where the CPU has AVX512_BF16, widened to float on AVX-512F or AVX2 elsewhere.
 * Lower precision than FP32 (about 3 significant digits per operand): validate the result.
 * *linears gets how many linears were converted (four per encoder layer). m borrowed; *out a new
 * reference. The result runs only where libtorchspeed is loaded: do not save it for stock PyTorch. */
TS_EXPORT ts_status* ts_module_linear_bf16(const ts_module* m, ts_module** out, int64_t* linears) TS_NOEXCEPT TS_MUST_CHECK;
/* A clone whose graphs (every method of the module and its submodules) call
 * torchspeed::conv2d_gemm (csrc/kernels/fastconv.cpp: im2col, then torchspeed::linear_packed's GEMM over
 * the weight packed here; output channels-last) where they called aten::_convolution,
 * aten::convolution or aten::conv2d with a constant 4-D float weight, constant or no bias,
 * constant stride, padding and dilation, groups 1, not transposed, and a depth IC x kh x kw the
 * kernel takes (576 at most); a relu that is the only use of the result is fused. *convs gets how
 * many convolutions were swapped, *relus how many took a relu. Same values up to float rounding.
 * The op runs ATen's convolution on the original weight for inputs with more output positions
 * than its kernel takes and for anything else it does not cover. Nothing is swapped on a CPU
 * without AVX2 and FMA. The result runs only where libtorchspeed is loaded: do not save it
 * for stock PyTorch. */
TS_EXPORT ts_status* ts_module_fast_conv(const ts_module* m, ts_module** out, int64_t* convs,
                                         int64_t* relus) TS_NOEXCEPT TS_MUST_CHECK;
/* A clone whose graphs (every method of the module and its submodules) call
 * torchspeed::quantize_per_tensor and torchspeed::dequantize where they called
 * aten::quantize_per_tensor and aten::dequantize.self (csrc/kernels/fastqdq.cpp): the same tensors
 * bit for bit, vectorized and parallel for float32 -> quint8/qint8 and back; and
 * torchspeed::add and torchspeed::add_relu where they called quantized::add and
 * quantized::add_relu (csrc/kernels/fastqadd.cpp: ATen 1.13's tensors bit for bit, vectorized and
 * parallel; only with libtorch 1.13 without FBGEMM). *quantizes, *dequantizes and *adds get how
 * many calls were swapped: no quantizes or dequantizes where libtorch has FBGEMM (its ops are
 * vectorized there, and round a few extreme values differently). The result runs only where
 * libtorchspeed is loaded: do not save it for stock PyTorch. */
TS_EXPORT ts_status* ts_module_fast_qdq_v2(const ts_module* m, ts_module** out, int64_t* quantizes,
                                           int64_t* dequantizes, int64_t* adds) TS_NOEXCEPT TS_MUST_CHECK;
/* A clone whose graphs (every method of the module and its submodules) compute each
 * %o = quantized::add[_relu](%c, %r, scale, zero_point) (either operand order) whose %c =
 * quantized::conv2d(%x, %w, ...) has no other use with torchspeed::conv2d_add (csrc/kernels/fastqconv.cpp):
 * one oneDNN convolution that adds into %r's buffer. Only where writing into %r is safe: %r made by
 * a node of the same block, not aliasing a graph input or output, a constant or %x, and every use
 * of anything that may alias it before the add. Outputs differ from ATen's pair by the conv's
 * own u8 rounding (at most about s_conv / (2 * scale) + 1 quanta). *fused gets how many pairs;
 * none where ts_conv_add_unavailable is not NULL. The result runs only where libtorchspeed is
 * loaded: do not save it for stock PyTorch. */
TS_EXPORT ts_status* ts_module_fuse_conv_add(const ts_module* m, ts_module** out, int64_t* fused) TS_NOEXCEPT TS_MUST_CHECK;
/* NULL when this build has torchspeed::conv2d_add; else a static sentence saying why not (the
 * package or libtorch it was built without). */
TS_EXPORT const char* ts_conv_add_unavailable(void) TS_NOEXCEPT;
/* A clone of an optimize_for_inference module (borrowed) that torch.jit.save can write and
 * torch::jit::load read back: each prim::ConstantMKLDNNTensor becomes torchspeed::mkldnn_constant
 * over a torchspeed.MkldnnConstant (pickled as a plain float tensor, re-laid out for oneDNN by the
 * loading process: a convolution weight as optimize_for_inference reordered it), and
 * prim::BroadcastMKLDNNTensors, prim::MKLDNNHardTanh_ and prim::MKLDNNClamp_ become
 * torchspeed::mkldnn_broadcast and mkldnn_hardtanh_. Same oneDNN layouts and primitives.
 * *constants gets how many constants were replaced, *others how many other nodes. Nothing is
 * replaced where ts_mkldnn_serve_unavailable is not NULL. The result runs only where
 * libtorchspeed or libtorchspeed_ops is loaded. */
TS_EXPORT ts_status* ts_module_serve_mkldnn(const ts_module* m, ts_module** out, int64_t* constants,
                                            int64_t* others) TS_NOEXCEPT TS_MUST_CHECK;
/* NULL when this build has torchspeed::mkldnn_constant; else a static sentence saying why not. */
TS_EXPORT const char* ts_mkldnn_serve_unavailable(void) TS_NOEXCEPT;
/* A clone of m (borrowed) whose forward starts with aten::contiguous(x, memory_format=
 * channels_last) for each of its tensor inputs listed in inputs[0..n) (0-based, self not
 * counted): stock operators only. */
TS_EXPORT ts_status* ts_module_channels_last_inputs(const ts_module* m, const int64_t* inputs, size_t n,
                                                    ts_module** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Runs forward with n borrowed inputs. */
TS_EXPORT ts_status* ts_module_forward(const ts_module* m, ts_tensor* const* inputs, size_t n,
                                       ts_outputs** out) TS_NOEXCEPT TS_MUST_CHECK;
/* ts_module_forward on the calling thread with a one-thread OpenMP team (the thread's previous
 * count restored after), unless the thread serves a ts_worker (its own count applies there): a
 * model run at one intra-op thread needs no dedicated thread, and this call leaves no OpenMP
 * pool on whichever thread makes it. */
TS_EXPORT ts_status* ts_module_forward_single(const ts_module* m, ts_tensor* const* inputs, size_t n,
                                              ts_outputs** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Runs any method of the module with n borrowed inputs. */
TS_EXPORT ts_status* ts_module_run_method(const ts_module* m, const char* method, ts_tensor* const* inputs,
                                          size_t n, ts_outputs** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Adds a method written in TorchScript to the module (torch::jit::Module::define). */
TS_EXPORT ts_status* ts_module_define(ts_module* m, const char* source) TS_NOEXCEPT TS_MUST_CHECK;
/* The forward method's schema, e.g. "forward(__torch__.M self, Tensor x) -> Tensor". */
TS_EXPORT ts_status* ts_module_schema(const ts_module* m, char** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Number of inputs forward takes, not counting self. */
TS_EXPORT ts_status* ts_module_num_inputs(const ts_module* m, int64_t* out) TS_NOEXCEPT TS_MUST_CHECK;
/* forward's graph (graph->toString()), inlined. */
TS_EXPORT ts_status* ts_module_graph(const ts_module* m, char** out) TS_NOEXCEPT TS_MUST_CHECK;
/* JSON object {"aten::conv2d": 20, ...}: forward's nodes by kind, inlined, sub-blocks included. */
TS_EXPORT ts_status* ts_module_node_counts(const ts_module* m, char** out) TS_NOEXCEPT TS_MUST_CHECK;
/* Newline-separated "path<TAB>type" of every submodule, depth first. */
TS_EXPORT ts_status* ts_module_submodules(const ts_module* m, char** out) TS_NOEXCEPT TS_MUST_CHECK;
/* A plain C++ loop: runs forward `runs` times on the calling thread and writes each run's
 * wall time in nanoseconds to ns[0..runs) (caller's buffer, written only on success). Used to
 * measure the bindings' own overhead. */
TS_EXPORT ts_status* ts_module_time_forward(const ts_module* m, ts_tensor* const* inputs, size_t n,
                                            int64_t runs, int64_t* ns) TS_NOEXCEPT TS_MUST_CHECK;

/* ---- outputs: forward's result flattened into named tensors ---- */
TS_EXPORT size_t ts_outputs_size(const ts_outputs* o) TS_NOEXCEPT;
/* "0" for a single tensor; "0", "1" for a tuple or list; dict keys; nested paths joined by ".". */
TS_EXPORT const char* ts_outputs_name(const ts_outputs* o, size_t i) TS_NOEXCEPT; /* borrowed */
TS_EXPORT ts_status* ts_outputs_get(const ts_outputs* o, size_t i, ts_tensor** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Every output at once, for the per-call path: for i < min(cap, size), tensors[i] gets a new
 * reference (ts_tensor_free) and names[i] a name borrowed from o (valid until ts_outputs_free).
 * The caller's arrays are written only on success. */
TS_EXPORT ts_status* ts_outputs_take_all(const ts_outputs* o, ts_tensor** tensors, const char** names,
                                         size_t cap) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT void ts_outputs_free(ts_outputs* o) TS_NOEXCEPT;

/* ---- workers: forward handed to a serving thread (csrc/abi/runtime.cpp) ----
 * libtorch's OpenMP pool belongs to the thread that calls it, so inference runs on a few
 * long-lived threads. A ts_worker hands a forward from any thread to such a thread with one
 * wake-up each way and nothing of the caller's language runtime in between: the serving thread
 * sits in ts_worker_serve, callers call ts_worker_forward. Safe from many threads, except
 * ts_worker_free, which the owner calls once ts_worker_serve has returned 0 and no call is in
 * flight. */
typedef struct ts_worker ts_worker;
TS_EXPORT ts_status* ts_worker_new(ts_worker** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT void ts_worker_free(ts_worker* w) TS_NOEXCEPT;
/* Runs on the serving thread: runs posted forwards (in order) until ts_worker_kick (returns 1:
 * the thread has other work to do; call again after it) or ts_worker_close (returns 0, after
 * every forward posted before the close has run). */
TS_EXPORT int32_t ts_worker_serve(ts_worker* w) TS_NOEXCEPT;
/* Makes ts_worker_serve return 1 (now, or at its next call if it is not waiting). */
TS_EXPORT void ts_worker_kick(ts_worker* w) TS_NOEXCEPT;
/* Makes ts_worker_serve return 0 once the forwards already posted have run; later
 * ts_worker_forward calls fail. */
TS_EXPORT void ts_worker_close(ts_worker* w) TS_NOEXCEPT;
/* ts_module_forward (m and inputs borrowed) run on the serving thread; waits for it. */
TS_EXPORT ts_status* ts_worker_forward(ts_worker* w, const ts_module* m, ts_tensor* const* inputs, size_t n,
                                       ts_outputs** out) TS_NOEXCEPT TS_MUST_CHECK;
/* How long (ns) each side of a worker hand-off spins before it sleeps, for every worker in the
 * process: the serving thread for its next job after each forward shorter than 10 x serve_ns
 * (serve_ns), a caller for its
 * result (wait_ns; only when the serving thread's last forward took less than wait_ns and its
 * OpenMP team is smaller than the CPUs the process may use, and one caller per worker at a
 * time). 0 sleeps at once. A wake-up from sleep costs tens of microseconds on VMs; spinning
 * holds a CPU. Defaults: 100000 and 500000. */
TS_EXPORT ts_status* ts_set_handoff_spin(int64_t serve_ns, int64_t wait_ns) TS_NOEXCEPT TS_MUST_CHECK;
/* Reads them (either pointer may be NULL). */
TS_EXPORT void ts_get_handoff_spin(int64_t* serve_ns, int64_t* wait_ns) TS_NOEXCEPT;
/* What the machine takes from a thread: spins on the calling thread for duration_ns (at most
 * 60 s), reading the monotonic clock back to back, and records every gap longer than
 * threshold_ns between two reads (interrupts, the hypervisor, other threads on the CPU). The
 * first cap gaps go to at_ns (offset from the start) and len_ns; totals get the counts of all.
 * Pin the thread to one CPU first to measure that CPU. */
typedef struct ts_gap_totals {
  int64_t elapsed_ns; /* time spent in the loop */
  int64_t reads;      /* clock reads */
  int64_t count;      /* gaps longer than the threshold (may exceed cap) */
  int64_t kept;       /* gaps written to at_ns/len_ns: min(count, cap) */
  int64_t lost_ns;    /* the sum of all of them */
  int64_t longest_ns;
} ts_gap_totals;
TS_EXPORT ts_status* ts_measure_gaps(int64_t duration_ns, int64_t threshold_ns, int64_t* at_ns, int64_t* len_ns,
                                     size_t cap, ts_gap_totals* totals) TS_NOEXCEPT TS_MUST_CHECK;
/* Work off the inference threads (tensor copies and conversions, loads, saves, graph passes,
 * quantization) runs with a one-thread OpenMP team on any thread but one that has called
 * ts_worker_serve: each thread that runs an OpenMP region keeps a pool of threads, and libgomp
 * shortens every pool's wait spin once their threads outnumber the CPUs. Forwards use the
 * calling thread's team as it is. */
/* ---- end of workers ---- */

/* ---- quantization (csrc/abi/quantize.cpp; graph rewrites in csrc/passes/quant_rewrite.cpp) ----
 * Graph-mode INT8 quantization as torch.ao.quantization.quantize_jit does it, without Python.
 * A config is a JSON object (NULL or "{}" means defaults):
 *   {"activation": OBS, "weight": OBS, "modules": {"<submodule path>": {"activation": OBS,
 *    "weight": OBS} | null, ...}}
 * where OBS is {"observer": "minmax" | "moving_average" | "histogram" | "percentile" |
 *   "per_channel_minmax" | "placeholder", "dtype": "quint8" | "qint8", "qscheme":
 *   "per_tensor_affine" | "per_tensor_symmetric" | "per_channel_symmetric" | "per_channel_affine",
 *   "reduce_range": bool, "quant_min"/"quant_max": int, "averaging_constant": 0.01, "bins": 2048,
 *   "upsample_rate": 128, "percentile": 99.99, "ch_axis": 0}.
 * Defaults: activations minmax quint8 per_tensor_affine; weights per_channel_minmax qint8
 * per_channel_symmetric. A module mapped to null stays FP32. Unknown keys, unknown module paths
 * and invalid values are errors. Engine names: "x86", "fbgemm", "onednn", "qnnpack"; "" keeps the
 * current engine. The engine is set process-wide (it decides how weights are prepacked and must
 * also be set before loading the saved INT8 model). */
/* Static quantization, step 1: eval, fold conv-bn, insert observers. *observed is a new module:
 * run forward on it with calibration batches, then call ts_quant_convert_v2. m is not modified. */
TS_EXPORT ts_status* ts_quant_prepare(const ts_module* m /* borrowed */, const char* config_json /* borrowed */,
                                      ts_module** observed /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Static quantization, step 2: sets the engine, inserts quantize/dequantize from the observers'
 * statistics and finalizes (the result is frozen: do not freeze it again). observed is not
 * modified and can be converted again.
 * preserved (borrowed) names n methods and attributes kept through the freeze that finalizing
 * does: a stateful model's reset method, methods the caller exports. */
TS_EXPORT ts_status* ts_quant_convert_v2(const ts_module* observed /* borrowed */, const char* engine /* borrowed */,
                                         const char* const* preserved /* borrowed */, size_t n,
                                         ts_module** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Dynamic quantization (quantize_dynamic_jit): INT8 weights, activations quantized at run time.
 * Quantizes aten::linear, and LSTM/GRU calls (aten::lstm/gru -> aten::quantized_lstm/gru with
 * prepacked qint8 cell weights, as eager quantize_dynamic does); the activation observer must be
 * "placeholder" (the default here), whose reduce_range the RNN cells use. preserved as
 * for ts_quant_convert_v2. */
TS_EXPORT ts_status* ts_quant_dynamic_v2(const ts_module* m /* borrowed */, const char* config_json /* borrowed */,
                                         const char* engine /* borrowed */, const char* const* preserved /* borrowed */,
                                         size_t n, ts_module** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* JSON array [{"path": "layer1.0.conv1", "type": "Conv2d", "params": 36864}, ...] of the
 * submodules graph-mode quantization can turn INT8 (Conv1d/2d/3d, Linear, LSTM, GRU), depth first. */
TS_EXPORT ts_status* ts_quant_layers(const ts_module* m /* borrowed */, char** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* A standalone observer module built from one OBS object (plus "weight_defaults": true for the
 * weight defaults): forward(x) records statistics, calculate_qparams() returns (scale,
 * zero_point), observed_range() returns (min, max). For tests and diagnostics. */
TS_EXPORT ts_status* ts_quant_observer(const char* config_json /* borrowed */, ts_module** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ---- end of quantization ---- */

/* ---- profiling and inspection (csrc/abi/runtime.cpp) ---- */
/* Runs forward once on inputs (borrowed) and writes a JSON object of the multiply-add work it
 * dispatched, by ATen op: {"aten::_convolution": {"flops": 3.6e9, "calls": 20}, "aten::addmm":
 * ...}. FLOP counts a multiply-add as 2, from the ops' input shapes: aten::_convolution (every
 * conv and transposed conv), mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, _addmm_activation
 * and CPU flash attention. Quantized and prepacked (mkldnn) ops are not counted: count the FP32
 * model. The forward runs on the calling thread. */
TS_EXPORT ts_status* ts_module_op_flops(const ts_module* m /* borrowed */, ts_tensor* const* inputs /* borrowed */,
                                        size_t n, char** json /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ts_module_define with the names saved TorchScript code uses: `ops.<namespace>.<op>` reaches
 * any registered operator (ops.quantized.linear, ops.quantized.conv2d_unpack, ...); `torch.<op>`
 * is aten as in ts_module_define. Dtypes are written as integer codes (torch.quint8 is 13). */
TS_EXPORT ts_status* ts_module_define_ops(ts_module* m, const char* source /* borrowed */) TS_NOEXCEPT TS_MUST_CHECK;
/* Runs forward once on inputs (borrowed) and writes a JSON object of the time each top-level
 * dispatched op took, in the order they ran: {"total_ns": 812345, "ops": [{"op":
 * "aten::conv2d", "ns": 90123, "shapes": "[1,3,224,224] [64,3,7,7]", "scope": "layer1.0.conv1"},
 * ...]}; scope is the submodule whose code dispatched it, "" when not known. Top level: ops an
 * op calls (aten::conv2d's aten::_convolution) are inside their caller's time, not listed apart;
 * ops that do not go through the dispatcher (prim::ListConstruct, constants) are not listed and
 * their time is in total_ns only. The forward runs on the calling thread. */
TS_EXPORT ts_status* ts_module_op_profile(const ts_module* m /* borrowed */, ts_tensor* const* inputs /* borrowed */,
                                          size_t n, char** json /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ts_module_op_profile for calls of any kind (ts_module_call_single with ints, strings, a stream's
 * state): ts_op_profile_begin starts recording the ops dispatched on the calling thread,
 * ts_op_profile_end stops and writes the same JSON, total_ns being the time between the two. One
 * profile at a time per thread: a second begin, or an end without a begin, fails
 * (TS_CODE_INVALID_ARGUMENT). A thread that ends before ts_op_profile_end frees its profile. */
TS_EXPORT ts_status* ts_op_profile_begin(void) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_op_profile_end(char** json /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ---- end of profiling and inspection ---- */

/* ---- TorchScript values, method calls, schemas and state (csrc/abi/value.cpp; API version 7) ----
 * A ts_value holds one TorchScript IValue: None, bool, int, float (double), str, Tensor, List,
 * Tuple or Dict. Models as their authors ship them take such arguments (forward(x, sr: int),
 * Optional[Tensor], List[Tensor], ...), return them, keep state in attributes and export extra
 * methods. Values are immutable once built; every ts_value is freed with ts_value_free. */
typedef struct ts_value ts_value;

/* Kinds, as ts_value_kind reports them. Codes are stable across versions. */
enum {
  TS_VALUE_NONE = 0,
  TS_VALUE_BOOL = 1,
  TS_VALUE_INT = 2,
  TS_VALUE_DOUBLE = 3,
  TS_VALUE_STRING = 4,
  TS_VALUE_TENSOR = 5,
  TS_VALUE_LIST = 6,
  TS_VALUE_TUPLE = 7,
  TS_VALUE_DICT = 8,
  TS_VALUE_OTHER = 9 /* devices, objects, futures...: no accessor; ts_value_type names it */
};

TS_EXPORT ts_status* ts_value_new_none(ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_value_new_bool(int32_t v, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_value_new_int(int64_t v, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_value_new_double(double v, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* s (borrowed) is len bytes, copied; it need not be NUL-terminated. */
TS_EXPORT ts_status* ts_value_new_string(const char* s, size_t len, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Takes another reference to t's storage (borrowed handle; no data is copied): the value and the
 * tensor share data, and either may be freed first. */
TS_EXPORT ts_status* ts_value_new_tensor(const ts_tensor* t, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* items (borrowed) are copied into the list. The element type is the items' common type
 * (List[Tensor], List[int], List[float], List[str], List[bool], List[Optional[Tensor]], ...),
 * List[Any] when they have none. An empty list is retyped to the declared List[T] when passed
 * to ts_module_call. */
TS_EXPORT ts_status* ts_value_new_list(ts_value* const* items, size_t n, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_value_new_tuple(ts_value* const* items, size_t n, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* A Dict[str, V] in the given key order; keys and values (borrowed) are copied. A repeated key
 * is an error. */
TS_EXPORT ts_status* ts_value_new_dict(const char* const* keys, ts_value* const* values, size_t n,
                                       ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT void ts_value_free(ts_value* v) TS_NOEXCEPT;

/* TS_VALUE_* of v (TS_VALUE_NONE for NULL). */
TS_EXPORT int32_t ts_value_kind(const ts_value* v) TS_NOEXCEPT;
/* TorchScript's spelling of v's type, e.g. "Dict[str, Tensor]", "List[int]", "Tensor". */
TS_EXPORT ts_status* ts_value_type(const ts_value* v, char** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Accessors fail (naming both types) when v is of another kind; no conversion is made. */
TS_EXPORT ts_status* ts_value_to_bool(const ts_value* v, int32_t* out) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_value_to_int(const ts_value* v, int64_t* out) TS_NOEXCEPT TS_MUST_CHECK;
TS_EXPORT ts_status* ts_value_to_double(const ts_value* v, double* out) TS_NOEXCEPT TS_MUST_CHECK;
/* *out is *len bytes plus a NUL (the string may hold NULs), released with ts_free. */
TS_EXPORT ts_status* ts_value_to_string(const ts_value* v, char** out /* new reference */, size_t* len) TS_NOEXCEPT TS_MUST_CHECK;
/* Shares the tensor's storage with v. */
TS_EXPORT ts_status* ts_value_to_tensor(const ts_value* v, ts_tensor** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Number of elements of a list or tuple, or of entries of a dict. */
TS_EXPORT ts_status* ts_value_len(const ts_value* v, size_t* out) TS_NOEXCEPT TS_MUST_CHECK;
/* Element i of a list or tuple, or the value of entry i (insertion order) of a dict. */
TS_EXPORT ts_status* ts_value_item(const ts_value* v, size_t i, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* The key of dict entry i as text (str keys as they are; int, float and bool keys printed). */
TS_EXPORT ts_status* ts_value_key(const ts_value* v, size_t i, char** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;

/* Runs any method of m (e.g. "forward", "reset_states") with n positional arguments (borrowed)
 * and returns its result as one value (None for methods returning nothing). Lists, tuples and
 * dicts are retyped to the declared argument types where their items fit; anything else that
 * does not match fails with TorchScript's message naming the argument and both types. Missing
 * trailing arguments take the schema's defaults. Runs under c10::InferenceMode on the calling
 * thread. A module whose methods mutate attributes (ts_module_state) must not be called from
 * two threads at once. */
TS_EXPORT ts_status* ts_module_call(const ts_module* m, const char* method /* borrowed */, ts_value* const* args,
                                    size_t n, ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ts_module_call on the calling thread with a one-thread OpenMP team (the thread's previous count
 * restored after), unless the thread serves a ts_worker: as ts_module_forward_single, for models
 * that take values other than tensors (ints, strings, lists) at one intra-op thread. */
TS_EXPORT ts_status* ts_module_call_single(const ts_module* m, const char* method /* borrowed */,
                                           ts_value* const* args, size_t n,
                                           ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ts_module_call plus nkw keyword arguments: kw_names[i] = kw_values[i] (all borrowed). */
TS_EXPORT ts_status* ts_module_call_kw(const ts_module* m, const char* method /* borrowed */, ts_value* const* args,
                                       size_t n, const char* const* kw_names, ts_value* const* kw_values, size_t nkw,
                                       ts_value** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* Newline-separated names of the module's own methods (forward and every exported method). */
TS_EXPORT ts_status* ts_module_methods(const ts_module* m, char** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* One method's schema as JSON:
 *   {"name": "forward", "schema": "forward(__torch__.M self, Tensor x, int sr) -> Tensor",
 *    "arguments": [{"name": "x", "type": "Tensor", "kind": "tensor"},
 *                  {"name": "sr", "type": "int", "kind": "int", "has_default": true, "default": 16000,
 *                   "kwarg_only": true}, ...],
 *    "returns": [{"type": "Dict[str, Tensor]", "kind": "dict", "elements": [...]}]}
 * self is left out. kind is one of tensor, int, float, bool, str, none, optional, list, tuple,
 * dict, number, other; optional, list, tuple and dict carry "elements" (their contained types,
 * dict: key then value). A default that has no JSON form (a tensor) is given as text. */
TS_EXPORT ts_status* ts_module_method_schema(const ts_module* m, const char* method /* borrowed */,
                                             char** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* The attributes a call of method may assign, as a sorted JSON array of dotted paths from m
 * (["_context", "_h", "encoder.cache"]): every prim::SetAttr in its graph and in the methods it
 * calls on itself and on submodules, and every attribute (or view of one) an in-place op writes
 * (a buffer updated with mul_ or copy_). Non-empty means the module is stateful: reset it before
 * comparing runs and give each concurrent stream its own copy (ts_module_clone). */
TS_EXPORT ts_status* ts_module_state(const ts_module* m, const char* method /* borrowed */,
                                     char** out /* new reference */) TS_NOEXCEPT TS_MUST_CHECK;
/* ---- end of values ---- */

/* ---- execution settings (csrc/abi/runtime.cpp) ----
 * How methods execute, as Triton's PyTorch backend sets it before each execution from its
 * model parameters (DISABLE_OPTIMIZED_EXECUTION, INFERENCE_MODE, ENABLE_JIT_EXECUTOR,
 * ENABLE_JIT_PROFILING). Each field is 0 or 1; libtorch's defaults are all 1.
 *  - optimized_execution: torch::jit::setGraphExecutorOptimize. THREAD-LOCAL (the calling
 *    thread). A method keeps one executor per value, so it can change between calls.
 *  - inference_mode: whether ts_module_forward and ts_module_run_method on the calling thread
 *    run under c10::InferenceMode (1) or c10::InferenceMode(false) under a NoGradGuard (0, what
 *    Triton does with INFERENCE_MODE false). THREAD-LOCAL; other calls always use InferenceMode.
 *  - jit_executor: torch::jit::getExecutorMode(), the profiling executor (1) or the legacy one
 *    (0). PROCESS-WIDE, and read when a method's executor is created, on its first run: set it
 *    before a module's first call.
 *  - jit_profiling: torch::jit::getProfilingMode(). PROCESS-WIDE; read by the profiling executor
 *    until it has built its optimized plan.
 * Process-wide settings change every thread's modules: callers serialize them with their
 * calls (Triton sets them before every execution and never restores them). */
typedef struct ts_exec_settings {
  int32_t optimized_execution;
  int32_t inference_mode;
  int32_t jit_executor;
  int32_t jit_profiling;
} ts_exec_settings;
/* The calling thread's thread-local settings and the process-wide ones. */
TS_EXPORT ts_status* ts_exec_settings_get(ts_exec_settings* out) TS_NOEXCEPT TS_MUST_CHECK;
/* Sets all four (a field other than 0 or 1 is TS_CODE_INVALID_ARGUMENT and sets nothing). */
TS_EXPORT ts_status* ts_exec_settings_set(const ts_exec_settings* s) TS_NOEXCEPT TS_MUST_CHECK;
/* ---- end of execution settings ---- */

#ifdef __cplusplus
}
#endif
#endif /* TORCHSPEED_H_ */
