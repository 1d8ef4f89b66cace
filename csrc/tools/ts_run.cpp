// ts_run: a plain libtorch program, independent of the shim, used by tests and benchmarks to
// show that torchspeed's artifacts load in stock libtorch and to time a bare C++ loop.
//
//   ts_run MODEL [--input float32:1x3x224x224:in.bin]... [--threads N] [--runs N] [--warmup N]
//          [--out DIR] [--engine NAME] [--channels-last] [--op-library LIB]...
//
// --op-library dlopens a library of custom operators (libtorchspeed_ops.so) before loading the
// model, as a stock server loads one (Triton through LD_PRELOAD, Python torch.ops.load_library).
//
// Inputs are raw little-endian files. Outputs (forward's tensors, flattened like the shim does)
// are written as DIR/NAME.bin with a line "NAME dtype shape" on stdout. With --runs, one line
// "ns N" per timed run.
#include <ATen/Parallel.h>
#include <torch/script.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32") return at::kFloat;
  if (s == "float64") return at::kDouble;
  if (s == "int64") return at::kLong;
  if (s == "int32") return at::kInt;
  if (s == "uint8") return at::kByte;
  if (s == "bool") return at::kBool;
  throw std::invalid_argument("unknown dtype " + s);
}

std::string dtype_name(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return "other";
  }
}

at::Tensor read_input(const std::string& spec) {
  auto a = spec.find(':');
  auto b = spec.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos) throw std::invalid_argument("bad --input " + spec);
  auto st = parse_dtype(spec.substr(0, a));
  std::vector<int64_t> shape;
  std::stringstream ss(spec.substr(a + 1, b - a - 1));
  for (std::string d; std::getline(ss, d, 'x');) shape.push_back(std::stoll(d));
  auto t = at::empty(shape, at::TensorOptions().dtype(st));
  std::ifstream f(spec.substr(b + 1), std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + spec.substr(b + 1));
  f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (static_cast<size_t>(f.gcount()) != t.nbytes()) throw std::runtime_error("short input file " + spec);
  return t;
}

void flatten(const c10::IValue& v, const std::string& path, std::vector<std::pair<std::string, at::Tensor>>& out) {
  auto child = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
  if (v.isTensor()) {
    out.emplace_back(path.empty() ? "0" : path, v.toTensor());
  } else if (v.isTuple()) {
    const auto& e = v.toTupleRef().elements();
    for (size_t i = 0; i < e.size(); i++) flatten(e[i], child(std::to_string(i)), out);
  } else if (v.isList()) {
    auto l = v.toListRef();
    for (size_t i = 0; i < l.size(); i++) flatten(l[i], child(std::to_string(i)), out);
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) flatten(kv.value(), child(kv.key().toStringRef()), out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      std::cerr << "usage: ts_run MODEL [--input dtype:shape:file]... [--threads N] [--runs N] [--warmup N] "
                   "[--out DIR] [--engine NAME] [--channels-last] [--op-library LIB]...\n";
      return 2;
    }
    std::string model = argv[1], outdir, engine;
    std::vector<at::Tensor> inputs;
    int threads = 0, runs = 0, warmup = 0;
    bool channels_last = false;
    for (int i = 2; i < argc; i++) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--input") inputs.push_back(read_input(next()));
      else if (a == "--threads") threads = std::stoi(next());
      else if (a == "--runs") runs = std::stoi(next());
      else if (a == "--warmup") warmup = std::stoi(next());
      else if (a == "--out") outdir = next();
      else if (a == "--engine") engine = next();
      else if (a == "--channels-last") channels_last = true;
      else if (a == "--op-library") {
        const std::string lib = next();
        // RTLD_GLOBAL, as torch.ops.load_library does; never closed: its operators stay registered.
        if (dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
          const char* why = dlerror();
          std::string msg = "cannot load op library ";
          msg += lib;
          msg += ": ";
          msg += why != nullptr ? why : "unknown error";
          throw std::runtime_error(msg);
        }
      }
      else throw std::invalid_argument("unknown flag " + a);
    }
    if (threads > 0) at::set_num_threads(threads);
    if (!engine.empty()) {
      for (auto e : at::globalContext().supportedQEngines())
        if (c10::toString(e) == engine || (engine == "onednn" && e == at::QEngine::ONEDNN) ||
            (engine == "x86" && e == at::QEngine::X86) || (engine == "fbgemm" && e == at::QEngine::FBGEMM) ||
            (engine == "qnnpack" && e == at::QEngine::QNNPACK))
          at::globalContext().setQEngine(e);
    }
    if (channels_last)
      for (auto& t : inputs)
        if (t.dim() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    auto m = torch::jit::load(model);
    m.eval();
    std::vector<c10::IValue> args(inputs.begin(), inputs.end());
    c10::InferenceMode guard;
    auto result = m.forward(args);
    for (int i = 0; i < warmup; i++) m.forward(args);
    for (int i = 0; i < runs; i++) {
      auto t0 = std::chrono::steady_clock::now();
      m.forward(args);
      auto t1 = std::chrono::steady_clock::now();
      std::cout << "ns " << std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() << "\n";
    }
    std::vector<std::pair<std::string, at::Tensor>> outs;
    flatten(result, "", outs);
    for (auto& [name, t] : outs) {
      auto c = t.contiguous();
      std::cout << "output " << name << " " << dtype_name(c.scalar_type());
      for (auto s : c.sizes()) std::cout << " " << s;
      std::cout << "\n";
      if (!outdir.empty()) {
        // Once per output, after the timing: the temporary strings cost nothing that matters.
        // NOLINTNEXTLINE(performance-inefficient-string-concatenation)
        std::ofstream f(outdir + "/" + name + ".bin", std::ios::binary);
        f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
        if (!f) throw std::runtime_error("cannot write output " + name);
      }
    }
    return 0;
  } catch (const c10::Error& e) {
    std::cerr << "ts_run: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "ts_run: " << e.what() << "\n";
  }
  return 1;
}
