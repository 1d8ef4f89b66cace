// TorchScript values (IValues) across the C ABI, calls of any method with them, method schemas
// and the state a method mutates. Models as their authors ship them take ints, floats, strings,
// Optionals, lists, tuples and dicts, keep RNN state in attributes, and export extra methods.
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include <torch/csrc/jit/api/function_impl.h>

#include "internal.h"

struct ts_value {
  c10::IValue v;
};

namespace {

ts_value* wrap(c10::IValue v) {
  auto h = std::make_unique<ts_value>();
  h->v = std::move(v);
  return h.release();
}

std::vector<c10::IValue> items_of(ts_value* const* items, size_t n, const char* what) {
  std::vector<c10::IValue> out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++) {
    if (items[i] == nullptr) throw std::invalid_argument(std::string(what) + " " + std::to_string(i) + " is NULL");
    out.push_back(items[i]->v);
  }
  return out;
}

// The narrowest element type of vals: List[Tensor] for tensors, List[int] for ints, ... so that a
// list built from Go values matches what TorchScript declared. Any when they have nothing in
// common (a generic list); an empty list is retyped against the schema at call time (coerce).
c10::TypePtr unified_type(const std::vector<c10::IValue>& vals) {
  if (vals.empty()) return c10::AnyType::get();
  c10::TypePtr t = vals[0].type();
  for (size_t i = 1; i < vals.size(); i++) {
    auto u = c10::unifyTypes(t, vals[i].type());
    if (!u) return c10::AnyType::get();
    t = *u;
  }
  return t;
}

// Rebuilds lists, tuples and dicts as the schema declares them (List[Tensor] rather than a
// generic List[Any], Optional[List[int]] around a list, ...). Values that do not fit are left as
// they are: the interpreter's own argument check then names the argument and both types.
c10::IValue coerce(const c10::IValue& v, const c10::TypePtr& want) {
  c10::TypePtr t = want;
  if (auto opt = t->cast<c10::OptionalType>()) {
    if (v.isNone()) return v;
    t = opt->getElementType();
  }
  if (auto lt = t->cast<c10::ListType>()) {
    if (!v.isList()) return v;
    const auto& elem = lt->getElementType();
    c10::impl::GenericList out(elem);
    for (const auto& x : v.toListRef()) {
      c10::IValue cx = coerce(x, elem);
      if (!cx.type()->isSubtypeOf(*elem)) return v;
      out.push_back(std::move(cx));
    }
    return out;
  }
  if (auto tt = t->cast<c10::TupleType>()) {
    if (!v.isTuple()) return v;
    const auto& elems = v.toTupleRef().elements();
    if (elems.size() != tt->elements().size()) return v;
    std::vector<c10::IValue> out;
    for (size_t i = 0; i < elems.size(); i++) out.push_back(coerce(elems[i], tt->elements()[i]));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  if (auto dt = t->cast<c10::DictType>()) {
    if (!v.isGenericDict()) return v;
    c10::impl::GenericDict out(dt->getKeyType(), dt->getValueType());
    for (const auto& kv : v.toGenericDict()) {
      c10::IValue cv = coerce(kv.value(), dt->getValueType());
      if (!kv.key().type()->isSubtypeOf(*dt->getKeyType()) || !cv.type()->isSubtypeOf(*dt->getValueType())) return v;
      out.insert(kv.key(), std::move(cv));
    }
    return out;
  }
  return v;
}

int32_t kind_of(const c10::IValue& v) {
  if (v.isNone()) return TS_VALUE_NONE;
  if (v.isBool()) return TS_VALUE_BOOL;
  if (v.isInt()) return TS_VALUE_INT;
  if (v.isDouble()) return TS_VALUE_DOUBLE;
  if (v.isString()) return TS_VALUE_STRING;
  if (v.isTensor()) return TS_VALUE_TENSOR;
  if (v.isList()) return TS_VALUE_LIST;
  if (v.isTuple()) return TS_VALUE_TUPLE;
  if (v.isGenericDict()) return TS_VALUE_DICT;
  return TS_VALUE_OTHER;
}

std::string dict_key_string(const c10::IValue& k) {
  if (k.isString()) return k.toStringRef();
  if (k.isInt()) return std::to_string(k.toInt());
  if (k.isBool()) return k.toBool() ? "True" : "False";
  if (k.isDouble()) {
    std::ostringstream os;
    os.precision(17);
    os << k.toDouble();
    return os.str();
  }
  throw std::runtime_error("dict key of type " + k.type()->annotation_str() + " has no text form");
}

const c10::IValue& checked(const ts_value* v, const char* op) {
  if (v == nullptr) throw std::invalid_argument(std::string(op) + ": value is NULL");
  return v->v;
}

[[noreturn]] void wrong_kind(const c10::IValue& v, const char* want) {
  throw std::invalid_argument(std::string("value is ") + v.type()->annotation_str() + ", not " + want);
}

torch::jit::Method find_method(const torch::jit::Module& m, const char* method) {
  if (method == nullptr) throw std::invalid_argument("method name is NULL");
  auto found = m.find_method(method);
  if (!found) {
    std::string have;
    for (const auto& meth : m.get_methods()) have += (have.empty() ? "" : ", ") + meth.name();
    throw std::invalid_argument(std::string("module has no method \"") + method + "\" (it has: " + have + ")");
  }
  return *found;
}

ts_status* call(const ts_module* m, const char* method, ts_value* const* args, size_t n, const char* const* kw_names,
                ts_value* const* kw_values, size_t nkw, ts_value** out) {
  TS_CHECK_ARG(m != nullptr && out != nullptr, "call", "module or out is NULL");
  torch::jit::Method meth = find_method(m->m, method);
  const auto& schema = meth.function().getSchema();
  const auto& sargs = schema.arguments();
  // Argument 0 is self; the method's own arguments follow.
  std::vector<c10::IValue> pos = items_of(args, n, "argument");
  for (size_t i = 0; i < pos.size() && i + 1 < sargs.size(); i++) pos[i] = coerce(pos[i], sargs[i + 1].type());
  torch::jit::Kwargs kwargs;
  for (size_t i = 0; i < nkw; i++) {
    if (kw_names == nullptr || kw_names[i] == nullptr || kw_values == nullptr || kw_values[i] == nullptr)
      throw std::invalid_argument("keyword argument " + std::to_string(i) + " is NULL");
    std::string name = kw_names[i];
    c10::IValue v = kw_values[i]->v;
    for (size_t j = 1; j < sargs.size(); j++)
      if (sargs[j].name() == name) v = coerce(v, sargs[j].type());
    kwargs.emplace(std::move(name), std::move(v));
  }
  c10::IValue result;
  {
    c10::InferenceMode guard;
    result = meth(std::move(pos), kwargs);
  }
  *out = wrap(std::move(result));
  return nullptr;
}

// ---- JSON ----

void write_value(tsimpl::JsonWriter& w, const c10::IValue& v) {
  if (v.isNone()) {
    w.null();
  } else if (v.isBool()) {
    w.value(v.toBool());
  } else if (v.isInt()) {
    w.value(static_cast<int64_t>(v.toInt()));
  } else if (v.isDouble()) {
    double d = v.toDouble();
    // JSON has no NaN or infinities: a default of float('nan') is written as its name.
    if (std::isfinite(d)) {
      w.value(d);
    } else {
      w.value(std::isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf"));
    }
  } else if (v.isString()) {
    w.value(v.toStringRef());
  } else if (v.isList() || v.isTuple()) {
    c10::ArrayRef<c10::IValue> elems = v.isList() ? v.toListRef() : v.toTupleRef().elements().asArrayRef();
    w.begin_array();
    for (const auto& e : elems) write_value(w, e);
    w.end_array();
  } else {
    // Tensors, devices and objects have no JSON form; say what they are.
    std::ostringstream os;
    os << v;
    w.value(os.str());
  }
}

std::string type_kind(const c10::TypePtr& t) {
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return "tensor";
    case c10::TypeKind::IntType: return "int";
    case c10::TypeKind::FloatType: return "float";
    case c10::TypeKind::BoolType: return "bool";
    case c10::TypeKind::StringType: return "str";
    case c10::TypeKind::NoneType: return "none";
    case c10::TypeKind::OptionalType: return "optional";
    case c10::TypeKind::ListType: return "list";
    case c10::TypeKind::TupleType: return "tuple";
    case c10::TypeKind::DictType: return "dict";
    case c10::TypeKind::NumberType: return "number";
    default: return "other";
  }
}

// Writes a type's fields (type, kind, elements) into the object w has open.
void write_type_fields(tsimpl::JsonWriter& w, const c10::TypePtr& t) {
  w.key("type").value(t->annotation_str()).key("kind").value(type_kind(t));
  auto contained = t->containedTypes();
  if (!contained.empty() && t->kind() != c10::TypeKind::TensorType) {
    w.key("elements").begin_array();
    for (const auto& c : contained) {
      w.begin_object();
      write_type_fields(w, c);
      w.end_object();
    }
    w.end_array();
  }
}

// ---- state: attributes that prim::SetAttr assigns ----

// Walks a method's graph with the dotted path of each module-typed value, so SetAttr on a
// submodule reached by GetAttr is named by its full path, and follows prim::CallMethod into
// submodules and other methods (reset_states called from forward, an LSTM wrapper's forward).
//
// Branches a module in eval mode never takes are skipped: scripted BatchNorm bumps
// num_batches_tracked in place under `if self.training`, which would make every scripted CNN
// look stateful. A condition is known false when it is a bool constant, a module's `training`
// read while that module is in eval mode, or the result of an If (a short-circuit `and`) whose
// taken branch yields a known-false value.
class StateFinder {
 public:
  explicit StateFinder(const torch::jit::Module& root) : root_(root) {}
  std::set<std::string> found;

  void method(const c10::ClassTypePtr& cls, const std::string& name, const std::string& path) {
    std::string key = cls->repr_str() + "|" + name + "|" + path;
    if (!seen_.insert(key).second) return;
    torch::jit::Function* fn = cls->findMethod(name);
    if (fn == nullptr) return;
    torch::jit::GraphFunction* gf = torch::jit::tryToGraphFunction(*fn);
    if (gf == nullptr) return;
    auto graph = gf->graph();
    std::map<const torch::jit::Value*, std::string> paths;
    if (!graph->inputs().empty()) paths[graph->inputs()[0]] = path;
    block(graph->block(), paths);
  }

 private:
  const torch::jit::Module& root_;
  std::set<std::string> seen_;
  std::set<const torch::jit::Value*> known_false_;

  // Whether the module at a dotted path is in eval mode (false when the path is not a module).
  bool in_eval(const std::string& path) const {
    torch::jit::Module m = root_;
    std::stringstream ss(path);
    std::string part;
    while (!path.empty() && std::getline(ss, part, '.')) {
      if (!m.hasattr(part)) return false;
      c10::IValue v = m.attr(part);
      if (!v.isModule()) return false;
      m = v.toModule();
    }
    return !m.is_training();
  }

  bool is_false_constant(const torch::jit::Node* node) const {
    if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value)) return false;
    if (node->output()->type()->kind() != c10::TypeKind::BoolType) return false;
    return node->i(c10::attr::value) == 0;
  }

  static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

  // paths maps module-typed values to their module's path, and attribute values (tensors read
  // with GetAttr, and views of them) to the attribute's path: an in-place op on one (a buffer
  // updated with mul_/copy_, no SetAttr at all) mutates that attribute.
  void block(torch::jit::Block* b, std::map<const torch::jit::Value*, std::string>& paths) {
    for (torch::jit::Node* node : b->nodes()) {
      auto it = node->inputs().empty() ? paths.end() : paths.find(node->inputs()[0]);
      bool on_module = it != paths.end() && node->inputs()[0]->type()->cast<c10::ClassType>() != nullptr;
      if (const c10::FunctionSchema* schema = node->maybeSchema()) {
        const auto& sargs = schema->arguments();
        for (size_t i = 0; i < node->inputs().size() && i < sargs.size(); i++) {
          auto at = paths.find(node->inputs()[i]);
          if (at == paths.end() || node->inputs()[i]->type()->cast<c10::ClassType>() || sargs[i].alias_info() == nullptr)
            continue;
          if (sargs[i].alias_info()->isWrite()) found.insert(at->second);
          const auto& rets = schema->returns();
          for (size_t j = 0; j < node->outputs().size() && j < rets.size(); j++)
            if (rets[j].alias_info() != nullptr) paths[node->outputs()[j]] = at->second;
        }
      }
      if (is_false_constant(node)) known_false_.insert(node->output());
      if (node->kind() == c10::prim::GetAttr && on_module && node->s(c10::attr::name) == "training" &&
          in_eval(it->second)) {
        known_false_.insert(node->output());
      }
      if (node->kind() == c10::prim::If && known_false_.count(node->inputs()[0]) && node->blocks().size() == 2) {
        torch::jit::Block* taken = node->blocks()[1];
        block(taken, paths);
        for (size_t j = 0; j < node->outputs().size() && j < taken->outputs().size(); j++)
          if (known_false_.count(taken->outputs()[j])) known_false_.insert(node->outputs()[j]);
        continue;
      }
      if (node->kind() == c10::prim::GetAttr && on_module) {
        paths[node->output()] = join(it->second, node->s(c10::attr::name));
      } else if (node->kind() == c10::prim::SetAttr && on_module) {
        found.insert(join(it->second, node->s(c10::attr::name)));
      } else if (node->kind() == c10::prim::CallMethod && on_module) {
        if (auto cls = node->inputs()[0]->type()->cast<c10::ClassType>())
          method(cls, node->s(c10::attr::name), it->second);
      }
      for (torch::jit::Block* sub : node->blocks()) block(sub, paths);
    }
  }
};

}  // namespace

extern "C" {

ts_status* ts_value_new_none(ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr, "value_new_none", "out is NULL");
  *out = wrap(c10::IValue());
  TS_API_END("value_new_none")
}

ts_status* ts_value_new_bool(int32_t v, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr, "value_new_bool", "out is NULL");
  *out = wrap(c10::IValue(v != 0));
  TS_API_END("value_new_bool")
}

ts_status* ts_value_new_int(int64_t v, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr, "value_new_int", "out is NULL");
  *out = wrap(c10::IValue(v));
  TS_API_END("value_new_int")
}

ts_status* ts_value_new_double(double v, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr, "value_new_double", "out is NULL");
  *out = wrap(c10::IValue(v));
  TS_API_END("value_new_double")
}

ts_status* ts_value_new_string(const char* s, size_t len, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr && (s != nullptr || len == 0), "value_new_string", "string or out is NULL");
  *out = wrap(c10::IValue(std::string(s == nullptr ? "" : s, len)));
  TS_API_END("value_new_string")
}

ts_status* ts_value_new_tensor(const ts_tensor* t, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(t != nullptr && out != nullptr, "value_new_tensor", "tensor or out is NULL");
  *out = wrap(c10::IValue(t->t));
  TS_API_END("value_new_tensor")
}

ts_status* ts_value_new_list(ts_value* const* items, size_t n, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr && (items != nullptr || n == 0), "value_new_list", "items or out is NULL");
  auto vals = items_of(items, n, "list item");
  c10::impl::GenericList list(unified_type(vals));
  list.reserve(vals.size());
  for (auto& v : vals) list.push_back(std::move(v));
  // No std::move: libtorch 1.13's List and Dict declare a copy constructor and no move one, and a
  // copy only shares the handle's storage.
  *out = wrap(c10::IValue(list));
  TS_API_END("value_new_list")
}

ts_status* ts_value_new_tuple(ts_value* const* items, size_t n, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr && (items != nullptr || n == 0), "value_new_tuple", "items or out is NULL");
  *out = wrap(c10::IValue(c10::ivalue::Tuple::create(items_of(items, n, "tuple item"))));
  TS_API_END("value_new_tuple")
}

ts_status* ts_value_new_dict(const char* const* keys, ts_value* const* values, size_t n, ts_value** out) noexcept {
  TS_API_BEGIN
  TS_CHECK_ARG(out != nullptr && ((keys != nullptr && values != nullptr) || n == 0), "value_new_dict",
               "keys, values or out is NULL");
  auto vals = items_of(values, n, "dict value");
  c10::impl::GenericDict dict(c10::StringType::get(), unified_type(vals));
  for (size_t i = 0; i < n; i++) {
    TS_CHECK_ARG(keys[i] != nullptr, "value_new_dict", "key " + std::to_string(i) + " is NULL");
    TS_CHECK_ARG(dict.insert(std::string(keys[i]), vals[i]).second, "value_new_dict",
                 std::string("key \"") + keys[i] + "\" given twice");
  }
  *out = wrap(c10::IValue(dict));
  TS_API_END("value_new_dict")
}

void ts_value_free(ts_value* v) noexcept { delete v; }

int32_t ts_value_kind(const ts_value* v) noexcept { return v == nullptr ? TS_VALUE_NONE : kind_of(v->v); }

ts_status* ts_value_type(const ts_value* v, char** out) noexcept {
  TS_API_BEGIN
  *out = tsimpl::dup_string(checked(v, "value_type").type()->annotation_str());
  TS_API_END("value_type")
}

ts_status* ts_value_to_bool(const ts_value* v, int32_t* out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_to_bool");
  if (!iv.isBool()) wrong_kind(iv, "bool");
  *out = iv.toBool() ? 1 : 0;
  TS_API_END("value_to_bool")
}

ts_status* ts_value_to_int(const ts_value* v, int64_t* out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_to_int");
  if (!iv.isInt()) wrong_kind(iv, "int");
  *out = iv.toInt();
  TS_API_END("value_to_int")
}

ts_status* ts_value_to_double(const ts_value* v, double* out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_to_double");
  if (!iv.isDouble()) wrong_kind(iv, "float");
  *out = iv.toDouble();
  TS_API_END("value_to_double")
}

ts_status* ts_value_to_string(const ts_value* v, char** out, size_t* len) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_to_string");
  if (!iv.isString()) wrong_kind(iv, "str");
  const std::string& s = iv.toStringRef();
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  *len = s.size();
  *out = p;
  TS_API_END("value_to_string")
}

ts_status* ts_value_to_tensor(const ts_value* v, ts_tensor** out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_to_tensor");
  if (!iv.isTensor()) wrong_kind(iv, "Tensor");
  auto h = std::make_unique<ts_tensor>(ts_tensor{iv.toTensor()});
  *out = h.release();
  TS_API_END("value_to_tensor")
}

ts_status* ts_value_len(const ts_value* v, size_t* out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_len");
  if (iv.isList()) {
    *out = iv.toListRef().size();
  } else if (iv.isTuple()) {
    *out = iv.toTupleRef().elements().size();
  } else if (iv.isGenericDict()) {
    *out = iv.toGenericDict().size();
  } else {
    wrong_kind(iv, "a list, tuple or dict");
  }
  TS_API_END("value_len")
}

ts_status* ts_value_item(const ts_value* v, size_t i, ts_value** out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_item");
  c10::IValue item;
  if (iv.isList() || iv.isTuple()) {
    c10::ArrayRef<c10::IValue> elems = iv.isList() ? iv.toListRef() : iv.toTupleRef().elements().asArrayRef();
    TS_CHECK_ARG(i < elems.size(), "value_item", "index " + std::to_string(i) + " out of range (length " + std::to_string(elems.size()) + ")");
    item = elems[i];
  } else if (iv.isGenericDict()) {
    auto d = iv.toGenericDict();
    TS_CHECK_ARG(i < d.size(), "value_item", "index " + std::to_string(i) + " out of range (length " + std::to_string(d.size()) + ")");
    auto it = d.begin();
    for (size_t k = 0; k < i; k++) ++it;
    item = it->value();
  } else {
    wrong_kind(iv, "a list, tuple or dict");
  }
  *out = wrap(std::move(item));
  TS_API_END("value_item")
}

ts_status* ts_value_key(const ts_value* v, size_t i, char** out) noexcept {
  TS_API_BEGIN
  const auto& iv = checked(v, "value_key");
  if (!iv.isGenericDict()) wrong_kind(iv, "a dict");
  auto d = iv.toGenericDict();
  TS_CHECK_ARG(i < d.size(), "value_key", "index " + std::to_string(i) + " out of range (length " + std::to_string(d.size()) + ")");
  auto it = d.begin();
  for (size_t k = 0; k < i; k++) ++it;
  *out = tsimpl::dup_string(dict_key_string(it->key()));
  TS_API_END("value_key")
}

ts_status* ts_module_call(const ts_module* m, const char* method, ts_value* const* args, size_t n, ts_value** out) noexcept {
  TS_API_BEGIN
  return call(m, method, args, n, nullptr, nullptr, 0, out);
  TS_API_END("call")
}

ts_status* ts_module_call_single(const ts_module* m, const char* method, ts_value* const* args, size_t n,
                                ts_value** out) noexcept {
  TS_API_BEGIN
  tsimpl::OneThreadTeam one;
  return call(m, method, args, n, nullptr, nullptr, 0, out);
  TS_API_END("call")
}

ts_status* ts_module_call_kw(const ts_module* m, const char* method, ts_value* const* args, size_t n,
                             const char* const* kw_names, ts_value* const* kw_values, size_t nkw, ts_value** out) noexcept {
  TS_API_BEGIN
  return call(m, method, args, n, kw_names, kw_values, nkw, out);
  TS_API_END("call")
}

ts_status* ts_module_methods(const ts_module* m, char** out) noexcept {
  TS_API_BEGIN
  std::string s;
  for (const auto& meth : m->m.get_methods()) s += (s.empty() ? "" : "\n") + meth.name();
  *out = tsimpl::dup_string(s);
  TS_API_END("methods")
}

ts_status* ts_module_method_schema(const ts_module* m, const char* method, char** out) noexcept {
  TS_API_BEGIN
  torch::jit::Method meth = find_method(m->m, method);
  const auto& schema = meth.function().getSchema();
  std::ostringstream text;
  text << schema;
  tsimpl::JsonWriter w;
  w.begin_object().key("name").value(meth.name()).key("schema").value(text.str()).key("arguments").begin_array();
  const auto& args = schema.arguments();
  for (size_t i = 1; i < args.size(); i++) {  // 0 is self
    const auto& a = args[i];
    w.begin_object().key("name").value(a.name());
    write_type_fields(w, a.type());
    if (a.default_value()) {
      w.key("has_default").value(true).key("default");
      write_value(w, *a.default_value());
    }
    if (a.kwarg_only()) w.key("kwarg_only").value(true);
    w.end_object();
  }
  w.end_array().key("returns").begin_array();
  for (const auto& r : schema.returns()) {
    w.begin_object();
    write_type_fields(w, r.type());
    w.end_object();
  }
  w.end_array().end_object();
  *out = tsimpl::dup_string(w.str());
  TS_API_END("method_schema")
}

ts_status* ts_module_state(const ts_module* m, const char* method, char** out) noexcept {
  TS_API_BEGIN
  torch::jit::Method meth = find_method(m->m, method);
  StateFinder f(m->m);
  f.method(m->m.type(), meth.name(), "");
  tsimpl::JsonWriter w;
  w.begin_array();
  for (const auto& p : f.found) w.value(p);
  w.end_array();
  *out = tsimpl::dup_string(w.str());
  TS_API_END("state")
}

}  // extern "C"
