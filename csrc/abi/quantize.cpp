// INT8 quantization with libtorch's graph-mode passes, without Python.
//
// The order mirrors torch/ao/quantization/quantize_jit.py (static post-training quantization):
//   eval -> FoldConvBatchNorm -> InsertObservers(qconfig_dict) -> calibration forwards (the
//   caller runs them on the observed module) -> eval -> InsertQuantDeQuant -> Finalize (which
//   freezes) -> constant propagation + dead-code elimination.
// quantize_jit's observers are TorchScript modules scripted from Python; here they are built at
// run time: a torch::jit::Module whose attributes are registered from C++ and whose methods are
// compiled with Module::define from TorchScript mirroring torch/ao/quantization/observer.py
// (libtorch 1.13). The passes read the attributes `dtype` and `qscheme` (ints: ScalarType and
// QScheme codes; with the native resolver dtypes must be written as integers), `ch_axis` for
// per-channel weights, and call `calculate_qparams`. With the same configuration and
// calibration data the result is bit-identical to Python's quantize_jit, except that a ReLU6
// after a quantized op is folded into that op's output qparams (quant_rewrite.cpp).
#include <ATen/Context.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/quantization/finalize.h>
#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/csrc/jit/passes/quantization/insert_quant_dequant.h>
#include <torch/csrc/jit/passes/quantization/quantization_type.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "internal.h"
#include "passes.h"

namespace {

using tsimpl::dup_string;

using tsimpl::JValue;

// ---- observers ----

// Codes as TorchScript sees them (c10::ScalarType, c10::QScheme).
constexpr int64_t kQUInt8 = static_cast<int64_t>(at::kQUInt8);  // 13
constexpr int64_t kQInt8 = static_cast<int64_t>(at::kQInt8);    // 12
constexpr int64_t kQInt32 = static_cast<int64_t>(at::kQInt32);  // 14
static_assert(kQUInt8 == 13 && kQInt8 == 12 && kQInt32 == 14, "ScalarType codes used in the TorchScript below");
static_assert(static_cast<int>(at::kPerTensorAffine) == 0 && static_cast<int>(at::kPerChannelAffine) == 1 &&
                  static_cast<int>(at::kPerTensorSymmetric) == 2 && static_cast<int>(at::kPerChannelSymmetric) == 3,
              "QScheme codes used in the TorchScript below");

#include "observers.inc"

struct ObserverSpec {
  std::string kind = "minmax";  // minmax, moving_average, histogram, percentile, per_channel_minmax, placeholder
  int64_t dtype = kQUInt8;
  int64_t qscheme = static_cast<int64_t>(at::kPerTensorAffine);
  bool reduce_range = false;
  bool custom_range = false;
  int64_t quant_min = 0, quant_max = 0;
  double averaging_constant = 0.01;
  int64_t bins = 2048;
  int64_t upsample_rate = 128;
  double percentile = 99.99;
  int64_t ch_axis = 0;
};

[[noreturn]] void bad(const std::string& where, const std::string& why) {
  throw std::invalid_argument(where + ": " + why);
}

int64_t parse_dtype(const std::string& where, const std::string& s) {
  if (s == "quint8") return kQUInt8;
  if (s == "qint8") return kQInt8;
  if (s == "qint32") return kQInt32;
  bad(where, "dtype \"" + s + "\" is not one of quint8, qint8, qint32");
}

int64_t parse_qscheme(const std::string& where, const std::string& s) {
  if (s == "per_tensor_affine") return static_cast<int64_t>(at::kPerTensorAffine);
  if (s == "per_tensor_symmetric") return static_cast<int64_t>(at::kPerTensorSymmetric);
  if (s == "per_channel_affine") return static_cast<int64_t>(at::kPerChannelAffine);
  if (s == "per_channel_symmetric") return static_cast<int64_t>(at::kPerChannelSymmetric);
  bad(where, "qscheme \"" + s +
                 "\" is not one of per_tensor_affine, per_tensor_symmetric, per_channel_affine, "
                 "per_channel_symmetric");
}

bool is_per_channel(int64_t qscheme) {
  return qscheme == static_cast<int64_t>(at::kPerChannelAffine) ||
         qscheme == static_cast<int64_t>(at::kPerChannelSymmetric);
}

double num_field(const JValue& o, const std::string& where, const char* key, double def) {
  const JValue* v = o.get(key);
  if (v == nullptr || v->kind == JValue::Null) return def;
  if (v->kind != JValue::Number) bad(where, std::string(key) + " must be a number");
  return v->num;
}

int64_t int_field(const JValue& o, const std::string& where, const char* key, int64_t def) {
  double d = num_field(o, where, key, static_cast<double>(def));
  if (d != std::floor(d)) bad(where, std::string(key) + " must be an integer");
  return static_cast<int64_t>(d);
}

// The observer a JSON object describes; `weight` picks the weight defaults (per-channel
// symmetric qint8) instead of the activation defaults (per-tensor affine quint8 min/max).
ObserverSpec parse_observer(const JValue* o, const std::string& where, bool weight) {
  ObserverSpec s;
  if (weight) {
    s.kind = "per_channel_minmax";
    s.dtype = kQInt8;
    s.qscheme = static_cast<int64_t>(at::kPerChannelSymmetric);
  }
  if (o == nullptr || o->kind == JValue::Null) {
    // defaults
  } else if (o->kind != JValue::Object) {
    bad(where, "must be an object");
  } else {
    for (const auto& kv : o->obj) {
      static const std::set<std::string> known = {"observer", "dtype", "qscheme", "reduce_range", "quant_min",
                                                  "quant_max", "averaging_constant", "bins", "upsample_rate",
                                                  "percentile", "ch_axis"};
      if (!known.count(kv.first)) bad(where, "unknown key \"" + kv.first + "\"");
    }
    if (const JValue* k = o->get("observer")) {
      if (k->kind != JValue::String) bad(where, "observer must be a string");
      s.kind = k->str;
      if (s.kind == "per_channel_minmax" && !o->get("qscheme")) {
        s.qscheme = static_cast<int64_t>(at::kPerChannelSymmetric);
      } else if (s.kind != "per_channel_minmax" && weight && !o->get("qscheme")) {
        s.qscheme = static_cast<int64_t>(at::kPerTensorSymmetric);
      }
    }
    if (const JValue* v = o->get("dtype")) {
      if (v->kind != JValue::String) bad(where, "dtype must be a string");
      s.dtype = parse_dtype(where, v->str);
    }
    if (const JValue* v = o->get("qscheme")) {
      if (v->kind != JValue::String) bad(where, "qscheme must be a string");
      s.qscheme = parse_qscheme(where, v->str);
    }
    if (const JValue* v = o->get("reduce_range")) {
      if (v->kind != JValue::Bool) bad(where, "reduce_range must be true or false");
      s.reduce_range = v->b;
    }
    const JValue* qmin = o->get("quant_min");
    const JValue* qmax = o->get("quant_max");
    bool has_min = qmin != nullptr && qmin->kind != JValue::Null;
    bool has_max = qmax != nullptr && qmax->kind != JValue::Null;
    if (has_min != has_max) bad(where, "give both quant_min and quant_max, or neither");
    if (has_min) {
      s.custom_range = true;
      s.quant_min = int_field(*o, where, "quant_min", 0);
      s.quant_max = int_field(*o, where, "quant_max", 0);
    }
    s.averaging_constant = num_field(*o, where, "averaging_constant", s.averaging_constant);
    s.bins = int_field(*o, where, "bins", s.bins);
    s.upsample_rate = int_field(*o, where, "upsample_rate", s.upsample_rate);
    s.percentile = num_field(*o, where, "percentile", s.percentile);
    s.ch_axis = int_field(*o, where, "ch_axis", s.ch_axis);
  }

  static const std::set<std::string> kinds = {"minmax", "moving_average", "histogram", "percentile",
                                              "per_channel_minmax", "placeholder"};
  if (!kinds.count(s.kind))
    bad(where, "observer \"" + s.kind +
                   "\" is not one of minmax, moving_average, histogram, percentile, per_channel_minmax, placeholder");
  bool pc = is_per_channel(s.qscheme);
  if (s.kind == "per_channel_minmax" && !pc)
    bad(where, "per_channel_minmax needs qscheme per_channel_symmetric or per_channel_affine");
  if (s.kind != "per_channel_minmax" && s.kind != "placeholder" && pc)
    bad(where, "observer " + s.kind + " is per-tensor: use qscheme per_tensor_affine or per_tensor_symmetric");
  if (s.averaging_constant <= 0 || s.averaging_constant > 1)
    bad(where, "averaging_constant must be in (0, 1], got " + std::to_string(s.averaging_constant));
  if (s.bins < 16) bad(where, "bins must be >= 16, got " + std::to_string(s.bins));
  if (s.upsample_rate < 1) bad(where, "upsample_rate must be >= 1");
  if (!(s.percentile > 50 && s.percentile <= 100))
    bad(where, "percentile must be in (50, 100], e.g. 99.99; got " + std::to_string(s.percentile));
  if (s.ch_axis < 0) bad(where, "ch_axis must be >= 0");
  if (s.reduce_range && s.dtype == kQUInt8 &&
      (s.qscheme == static_cast<int64_t>(at::kPerTensorSymmetric) ||
       s.qscheme == static_cast<int64_t>(at::kPerChannelSymmetric)))
    bad(where, "reduce_range cannot be used with symmetric quint8 (as in PyTorch)");

  // calculate_qmin_qmax (torch/ao/quantization/utils.py).
  if (s.custom_range) {
    if (!(s.quant_min <= 0 && 0 <= s.quant_max)) bad(where, "quant_min..quant_max must include 0");
    if (!(s.quant_min < s.quant_max)) bad(where, "quant_min must be < quant_max");
    int64_t len = s.quant_max - s.quant_min + 1;
    if (s.dtype != kQInt32 && len > 256) bad(where, "quant_min..quant_max spans more than 256 values");
    if (s.reduce_range) {
      // Python floor division.
      auto fdiv = [](int64_t a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); };
      s.quant_min = fdiv(s.quant_min);
      s.quant_max = fdiv(s.quant_max);
    }
  } else if (s.dtype == kQInt8) {
    s.quant_min = s.reduce_range ? -64 : -128;
    s.quant_max = s.reduce_range ? 63 : 127;
  } else if (s.dtype == kQUInt8) {
    s.quant_min = 0;
    s.quant_max = s.reduce_range ? 127 : 255;
  } else {
    s.quant_min = std::numeric_limits<int32_t>::min();
    s.quant_max = std::numeric_limits<int32_t>::max();
  }
  return s;
}

// An observer's statistics before it has seen data, by buffer name.
std::vector<std::pair<std::string, at::Tensor>> initial_state(const ObserverSpec& s) {
  std::vector<std::pair<std::string, at::Tensor>> st;
  if (s.kind == "placeholder") return st;
  if (s.kind == "per_channel_minmax") {
    st.emplace_back("min_val", at::empty({0}, at::kFloat));
    st.emplace_back("max_val", at::empty({0}, at::kFloat));
  } else {
    st.emplace_back("min_val", at::scalar_tensor(std::numeric_limits<float>::infinity(), at::kFloat));
    st.emplace_back("max_val", at::scalar_tensor(-std::numeric_limits<float>::infinity(), at::kFloat));
  }
  if (s.kind == "histogram" || s.kind == "percentile") st.emplace_back("histogram", at::zeros({s.bins}, at::kFloat));
  return st;
}

// Puts a compiled observer back to its state before any data, so that one compiled observer
// serves many weights.
void reset_observer(torch::jit::Module& m, const ObserverSpec& s) {
  for (auto& kv : initial_state(s)) m.setattr(kv.first, kv.second);
}

torch::jit::Module make_observer(const ObserverSpec& s, const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  using namespace c10;
  std::string cls = s.kind == "minmax"             ? "MinMaxObserver"
                    : s.kind == "moving_average"   ? "MovingAverageMinMaxObserver"
                    : s.kind == "histogram"        ? "HistogramObserver"
                    : s.kind == "percentile"       ? "PercentileObserver"
                    : s.kind == "per_channel_minmax" ? "PerChannelMinMaxObserver"
                                                     : "PlaceholderObserver";
  torch::jit::Module m(c10::QualifiedName("__torch__.torchspeed.observer." + cls), cu, /*shouldMangle=*/true);
  m.register_attribute("training", BoolType::get(), true);
  m.register_attribute("dtype", IntType::get(), s.dtype);
  if (s.kind == "placeholder") {
    m.register_attribute("compute_dtype", IntType::get(), s.dtype);
    m.register_attribute("custom_op", StringType::get(), std::string());
#if TORCH_VERSION_MAJOR >= 2
    // libtorch 2.x's InsertQuantDeQuant takes a placeholder observer's dtype only when the
    // observer says `is_dynamic` (torch.ao's PlaceholderObserver(is_dynamic=True)); without it
    // no qparams are collected and the pass reads the dtype attribute name from an empty list
    // (a crash in Graph::createGetAttr). 1.13 reads `compute_dtype`, kept above.
    m.register_attribute("is_dynamic", BoolType::get(), true);
#endif
    m.define(kPlaceholder);
    return m;
  }
  m.register_attribute("qscheme", IntType::get(), s.qscheme);
  m.register_attribute("reduce_range", BoolType::get(), s.reduce_range);
  m.register_attribute("has_customized_qrange", BoolType::get(), s.custom_range);
  m.register_attribute("quant_min", IntType::get(), s.quant_min);
  m.register_attribute("quant_max", IntType::get(), s.quant_max);
  m.register_attribute("ch_axis", IntType::get(), s.ch_axis);
  m.register_buffer("eps", at::tensor({std::numeric_limits<float>::epsilon()}, at::kFloat));
  std::string src = kCalcQParams;
  for (auto& kv : initial_state(s)) m.register_buffer(kv.first, kv.second);
  if (s.kind == "per_channel_minmax") {
    src += kPerChannel;
  } else {
    if (s.kind == "minmax") {
      src += kMinMax;
    } else if (s.kind == "moving_average") {
      m.register_attribute("averaging_constant", FloatType::get(), s.averaging_constant);
      src += kMovingAverage;
    } else {
      m.register_attribute("bins", IntType::get(), s.bins);
      m.register_attribute("upsample_rate", IntType::get(), s.upsample_rate);
      m.register_attribute("dst_nbins", IntType::get(), int64_t(1) << (s.dtype == kQInt32 ? 32 : 8));
      src += kHistogramForward;
      if (s.kind == "histogram") {
        src += kHistogramQParams;
      } else {
        m.register_attribute("percentile", FloatType::get(), s.percentile);
        src += kPercentileQParams;
      }
    }
  }
  m.define(src);
  return m;
}

using torch::jit::QConfig;
using torch::jit::QConfigDict;

c10::optional<QConfig> parse_qconfig(const JValue* o, const std::string& where, bool dynamic,
                                     const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  if (o != nullptr && o->kind == JValue::Null) return c10::nullopt;
  if (o != nullptr && o->kind != JValue::Object) bad(where, "must be an object or null");
  const JValue* act = o ? o->get("activation") : nullptr;
  const JValue* w = o ? o->get("weight") : nullptr;
  if (o) {
    for (const auto& kv : o->obj)
      if (kv.first != "activation" && kv.first != "weight" && kv.first != "modules")
        bad(where, "unknown key \"" + kv.first + "\" (use activation, weight, modules)");
  }
  ObserverSpec a = parse_observer(act, where + ".activation", /*weight=*/false);
  if (dynamic) {
    if (act == nullptr || act->kind == JValue::Null || !act->get("observer")) a.kind = "placeholder";
    if (a.kind != "placeholder")
      bad(where + ".activation", "dynamic quantization chooses activation ranges at run time: use observer placeholder");
  } else if (a.kind == "placeholder" || a.kind == "per_channel_minmax") {
    bad(where + ".activation", "observer " + a.kind + " cannot observe activations for static quantization");
  }
  ObserverSpec ws = parse_observer(w, where + ".weight", /*weight=*/true);
  if (ws.kind == "placeholder") bad(where + ".weight", "weights need a real observer (per_channel_minmax or minmax)");
  if (ws.dtype != kQInt8) bad(where + ".weight", "weights are quantized to qint8");
  return QConfig(make_observer(a, cu), make_observer(ws, cu));
}

// A parsed configuration: the passes' QConfigDict, and the top-level observer specs the dynamic
// LSTM/GRU rewrite needs. Parsed, and its observers compiled, once per call.
struct ParsedConfig {
  QConfigDict dict;
  ObserverSpec weight;
  ObserverSpec activation;
};

ParsedConfig parse_config(const char* json, bool dynamic, const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  std::string text = json == nullptr ? "{}" : json;
  JValue root = tsimpl::parse_json(text, "config");
  if (root.kind != JValue::Object) bad("config", "must be a JSON object");
  ParsedConfig pc;
  pc.weight = parse_observer(root.get("weight"), "config.weight", /*weight=*/true);
  pc.activation = parse_observer(root.get("activation"), "config.activation", /*weight=*/false);
  QConfigDict& dict = pc.dict;
  dict[""] = parse_qconfig(&root, "config", dynamic, cu);
  if (const JValue* mods = root.get("modules")) {
    if (mods->kind != JValue::Object) bad("config.modules", "must be an object of module path -> qconfig or null");
    for (const auto& kv : mods->obj) {
      if (kv.second.kind == JValue::Object && kv.second.get("modules"))
        bad("config.modules." + kv.first, "nested modules are not allowed");
      dict[kv.first] = parse_qconfig(&kv.second, "config.modules." + kv.first, dynamic, cu);
    }
  }
  return pc;
}

// Module paths named in the config must exist, or a typo would silently quantize a layer the
// user wanted in FP32.
void check_paths(const torch::jit::Module& m, const QConfigDict& dict) {
  std::set<std::string> have;
  for (const auto& nm : m.named_modules()) have.insert(nm.name);
  for (const auto& kv : dict) {
    if (kv.first.empty()) continue;
    if (!have.count(kv.first)) {
      std::string some;
      int n = 0;
      for (const auto& p : have) {
        if (p.empty()) continue;
        if (n++ == 12) {
          some += ", ...";
          break;
        }
        some += (some.empty() ? "" : ", ") + p;
      }
      bad("config.modules", "the model has no submodule \"" + kv.first + "\" (submodules: " + some + ")");
    }
  }
}


// Selects the engine by name ("" keeps the current one). Prepacked weights are made for the
// engine set when Finalize runs, and an INT8 model must run under the engine it was made for.
void select_engine_if_named(const char* name) {
  if (name == nullptr || *name == '\0') return;
  tsimpl::select_engine(name);
}

void cleanup_forward(torch::jit::Module& m) {
  auto graph = m.get_method("forward").graph();
  torch::jit::ConstantPropagation(graph);
  torch::jit::EliminateDeadCode(graph);
}

torch::jit::Module prepare(const torch::jit::Module& src, const QConfigDict& dict, torch::jit::QuantType qt) {
  if (!src.find_method("forward").has_value()) tsimpl::fail(TS_CODE_NOT_FOUND, "the model has no forward method");
  check_paths(src, dict);
  torch::jit::Module m = src.clone();
  m.eval();
  // quantize_jit folds conv-bn on the unfrozen module first; FoldConvBatchNorm returns a copy.
  m = torch::jit::FoldConvBatchNorm(m);
  return torch::jit::InsertObservers(m, "forward", dict, /*inplace=*/true, qt);
}

// Finalize freezes: preserved names the methods (a stateful model's reset method) and attributes
// that must survive it.
torch::jit::Module convert(const torch::jit::Module& observed, torch::jit::QuantType qt,
                           const std::vector<std::string>& preserved) {
  // A copy: the observed module stays usable (another engine, another try).
  torch::jit::Module m = observed.clone();
  m.eval();
  m = torch::jit::InsertQuantDeQuant(m, "forward", /*inplace=*/true, /*debug=*/false, qt);
  m = torch::jit::Finalize(m, qt, preserved);
  // quantize_jit runs these twice (in _convert_jit and _quantize_jit); they are idempotent.
  cleanup_forward(m);
  if (qt == torch::jit::QuantType::STATIC && tsimpl::fold_quantized_clamps(observed, m) > 0) cleanup_forward(m);
  return m;
}

std::string short_type(const torch::jit::Module& m) {
  auto name = m.type()->name();
  if (!name) return "?";
  std::string q = name->name();  // last component, e.g. "Conv2d"
  return q;
}


// ---- dynamic LSTM/GRU (the rewrite is in quant_rewrite.cpp) ----

// The qconfig that applies to a module path: its own entry, else the nearest parent's, else "".
const c10::optional<QConfig>* qconfig_for(const QConfigDict& dict, std::string path) {
  while (true) {
    auto it = dict.find(path);
    if (it != dict.end()) return &it->second;
    if (path.empty()) return nullptr;
    auto dot = path.rfind('.');
    path = dot == std::string::npos ? std::string() : path.substr(0, dot);
  }
}

// Quantizes one weight to qint8 with the weight observer obs (compiled once per call and reset
// here for each weight, so each weight gets a fresh observer).
at::Tensor observe_and_quantize(const at::Tensor& w, const ObserverSpec& spec, torch::jit::Module& obs) {
  reset_observer(obs, spec);
  at::Tensor wf = w.detach().to(at::kFloat).contiguous();
  obs.forward({wf});
  auto qp = obs.get_method("calculate_qparams")({}).toTuple();
  at::Tensor scale = qp->elements()[0].toTensor(), zp = qp->elements()[1].toTensor();
  if (is_per_channel(spec.qscheme))
    return at::quantize_per_channel(wf, scale.to(at::kDouble), zp.to(at::kLong), spec.ch_axis, at::kQInt8);
  return at::quantize_per_tensor(wf, scale.item<double>(), zp.item<int64_t>(), at::kQInt8);
}

}  // namespace

extern "C" {

ts_status* ts_quant_observer(const char* config_json, ts_module** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(config_json, "quant_observer");
  TS_CHECK_NOT_NULL(out, "quant_observer");
  JValue root = tsimpl::parse_json(config_json, "observer");
  if (root.kind != JValue::Object) bad("observer", "must be a JSON object");
  const JValue* w = root.get("weight_defaults");
  bool weight = w != nullptr && w->kind == JValue::Bool && w->b;
  JValue spec = root;
  spec.obj.erase(std::remove_if(spec.obj.begin(), spec.obj.end(),
                                [](const std::pair<std::string, JValue>& kv) { return kv.first == "weight_defaults"; }),
                 spec.obj.end());
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto h = std::make_unique<ts_module>();
  h->m = make_observer(parse_observer(&spec, "observer", weight), cu);
  *out = h.release();
  TS_API_END("quant_observer")
}

ts_status* ts_quant_prepare(const ts_module* m, const char* config_json, ts_module** observed) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "quant_prepare");
  TS_CHECK_NOT_NULL(observed, "quant_prepare");
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  ParsedConfig cfg = parse_config(config_json, /*dynamic=*/false, cu);
  auto h = std::make_unique<ts_module>();
  h->m = prepare(m->m, cfg.dict, torch::jit::QuantType::STATIC);
  h->extra = m->extra;
  *observed = h.release();
  TS_API_END("quant_prepare")
}

static std::vector<std::string> preserved_names(const char* const* preserved, size_t n) {
  if (n > 0 && preserved == nullptr) tsimpl::fail(TS_CODE_INVALID_ARGUMENT, "preserved is NULL with n = " + std::to_string(n));
  std::vector<std::string> keep;
  for (size_t i = 0; i < n; i++) {
    if (preserved[i] == nullptr) tsimpl::fail(TS_CODE_INVALID_ARGUMENT, "preserved name " + std::to_string(i) + " is NULL");
    keep.emplace_back(preserved[i]);
  }
  return keep;
}

ts_status* ts_quant_convert_v2(const ts_module* observed, const char* engine, const char* const* preserved, size_t n,
                               ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(observed, "quant_convert");
  TS_CHECK_NOT_NULL(out, "quant_convert");
  auto keep = preserved_names(preserved, n);
  select_engine_if_named(engine);
  auto h = std::make_unique<ts_module>();
  h->m = convert(observed->m, torch::jit::QuantType::STATIC, keep);
  h->extra = observed->extra;
  *out = h.release();
  TS_API_END("quant_convert")
}

ts_status* ts_quant_dynamic_v2(const ts_module* m, const char* config_json, const char* engine,
                               const char* const* preserved, size_t n, ts_module** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam team;  // off the inference threads: leave no OpenMP pool
  TS_CHECK_NOT_NULL(m, "quant_dynamic");
  TS_CHECK_NOT_NULL(out, "quant_dynamic");
  auto keep = preserved_names(preserved, n);
  // Parsed once, observers compiled once: the passes and the LSTM/GRU rewrite share them.
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  ParsedConfig cfg = parse_config(config_json, /*dynamic=*/true, cu);
  select_engine_if_named(engine);
  // quantize_dynamic_jit: prepare_dynamic_jit then convert_dynamic_jit; the weight observers
  // are run by InsertQuantDeQuant itself, no calibration data is needed.
  torch::jit::Module observed = prepare(m->m, cfg.dict, torch::jit::QuantType::DYNAMIC);
  auto h = std::make_unique<ts_module>();
  h->m = convert(observed, torch::jit::QuantType::DYNAMIC, keep);
  // LSTM/GRU: the passes above quantize aten::linear only.
  c10::optional<torch::jit::Module> wproto;  // the weight observer, compiled at its first weight
  auto keep_fp32 = [&](const std::string& path) {
    const auto* qc = qconfig_for(cfg.dict, path);
    return qc != nullptr && !qc->has_value();
  };
  auto quantize_weight = [&](const at::Tensor& w) {
    if (!wproto) wproto = make_observer(cfg.weight, cu);
    return observe_and_quantize(w, cfg.weight, *wproto);
  };
  if (tsimpl::quantize_dynamic_rnns(m->m, h->m, keep_fp32, quantize_weight, cfg.activation.reduce_range) > 0)
    cleanup_forward(h->m);
  h->extra = m->extra;
  *out = h.release();
  TS_API_END("quant_dynamic")
}

ts_status* ts_quant_layers(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_NOT_NULL(m, "quant_layers");
  TS_CHECK_NOT_NULL(out, "quant_layers");
  static const std::set<std::string> quantizable = {"Conv1d", "Conv2d", "Conv3d", "Linear", "LSTM", "GRU"};
  tsimpl::JsonWriter w;
  w.begin_array();
  for (const auto& nm : m->m.named_modules()) {
    if (nm.name.empty()) continue;
    std::string t = short_type(nm.value);
    if (!quantizable.count(t)) continue;
    int64_t params = 0;
    for (const auto& p : nm.value.parameters(/*recurse=*/false)) params += p.numel();
    w.begin_object().key("path").value(nm.name).key("type").value(t).key("params").value(params).end_object();
  }
  w.end_array();
  *out = dup_string(w.str());
  TS_API_END("quant_layers")
}

}  // extern "C"
