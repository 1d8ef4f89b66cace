// The shim's leaf helpers (see common.h) and the status and memory functions of the C ABI. No
// torch headers: this file compiles in about a second.
#include "common.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

// Built at static initialisation, so reporting an out-of-memory failure allocates nothing.
ts_status g_oom{TS_CODE_OUT_OF_MEMORY, "torchspeed", "out of memory", "torchspeed: out of memory", 0, true};

}  // namespace

namespace tsimpl {

ts_status* oom_status() noexcept { return &g_oom; }
bool is_static_status(const ts_status* s) noexcept { return s != nullptr && s->preallocated; }

ts_status* make_status(int32_t code, const char* op, const char* reason) noexcept {
  try {
    auto* s = new ts_status{code, op != nullptr ? op : "torchspeed", reason != nullptr ? reason : "", ""};
    s->message = s->op + ": " + s->reason;
    return s;
  } catch (...) {
    return &g_oom;
  }
}

ts_status* make_status(int32_t code, const char* op, const std::string& reason) noexcept {
  return make_status(code, op, reason.c_str());
}

ts_status* io_status(const char* op, const std::string& reason, int err) noexcept {
  ts_status* s = make_status(TS_CODE_IO, op, reason);
  if (!is_static_status(s)) s->sys_errno = err;
  return s;
}

ts_status* make_status(const std::string& message) noexcept {
  try {
    auto colon = message.find(": ");
    if (colon == std::string::npos) return make_status(TS_CODE_MODEL_ERROR, "torchspeed", message.c_str());
    return make_status(TS_CODE_MODEL_ERROR, message.substr(0, colon).c_str(), message.substr(colon + 2).c_str());
  } catch (...) {
    return &g_oom;
  }
}

void fail(int32_t code, const std::string& msg) { throw CodedError(code, msg); }

char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

std::string clip(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;  // whole UTF-8 characters
  return s.substr(0, cut) + "... (" + std::to_string(s.size() - cut) + " more bytes)";
}

std::string dtype_name(int32_t code) {
  static const char* const names[] = {"float32", "float64", "int64", "int32", "uint8",  "bool",  "int8",
                                      "int16",   "float16", "bfloat16", "quint8", "qint8", "qint32"};
  if (code >= 0 && code < static_cast<int32_t>(sizeof names / sizeof names[0])) return names[code];
  return "dtype(" + std::to_string(code) + ")";
}

const char* engine_name_of(int value) noexcept {
  switch (value) {
    case 0: return "none";
    case 1: return "fbgemm";
    case 2: return "qnnpack";
    case 3: return "onednn";
    case 4: return "x86";
  }
  return "unknown";
}

// ---- JSON ----

const JValue* JValue::get(const std::string& key) const {
  for (const auto& kv : obj)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {

class JParser {
 public:
  JParser(const std::string& s, const std::string& what) : s_(s), what_(what) {}

  JValue parse() {
    JValue v = value(0);
    space();
    if (i_ != s_.size()) fail_at("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail_at(const std::string& why) {
    fail(TS_CODE_INVALID_ARGUMENT, what_ + " JSON: " + why + " at offset " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) i_++;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) {
      i_++;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail_at(std::string("expected '") + c + "'");
  }
  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail_at("short \\u escape");
    unsigned cp = 0;
    for (int k = 0; k < 4; k++) {
      char c = s_[i_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= static_cast<unsigned>(c - 'A' + 10);
      else fail_at("bad \\u escape");
    }
    return cp;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail_at("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          unsigned cp = hex4();
          // Module paths and names are ASCII; other code points are kept as UTF-8.
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: out += e;
      }
    }
    if (i_ >= s_.size()) fail_at("unterminated string");
    i_++;
    return out;
  }
  JValue value(int depth) {
    if (depth > 64) fail_at("nested deeper than 64 levels");
    space();
    if (i_ >= s_.size()) fail_at("unexpected end");
    JValue v;
    char c = s_[i_];
    if (c == '{') {
      i_++;
      v.kind = JValue::Object;
      if (eat('}')) return v;
      do {
        space();
        std::string k = string();
        expect(':');
        v.obj.emplace_back(k, value(depth + 1));
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      i_++;
      v.kind = JValue::Array;
      if (eat(']')) return v;
      do {
        v.arr.push_back(value(depth + 1));
      } while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = JValue::String;
      v.str = string();
    } else if (word("true")) {
      v.kind = JValue::Bool;
      v.b = true;
    } else if (word("false")) {
      v.kind = JValue::Bool;
    } else if (word("null")) {
      v.kind = JValue::Null;
    } else {
      const char* start = s_.c_str() + i_;
      char* end = nullptr;
      v.num = std::strtod(start, &end);
      if (end == start) fail_at("expected a value");
      v.kind = JValue::Number;
      i_ += static_cast<size_t>(end - start);
    }
    return v;
  }

  const std::string& s_;
  const std::string& what_;
  size_t i_ = 0;
};

}  // namespace

JValue parse_json(const std::string& text, const std::string& what) { return JParser(text, what).parse(); }

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

std::string json_quote(const std::string& s) { return "\"" + json_escape(s) + "\""; }

void JsonWriter::comma() {
  if (need_comma_) out_ += ',';
  need_comma_ = false;
}
JsonWriter& JsonWriter::begin_object() {
  comma();
  out_ += '{';
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  comma();
  out_ += '[';
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::key(const std::string& k) {
  comma();
  out_ += json_quote(k);
  out_ += ':';
  return *this;
}
JsonWriter& JsonWriter::value(const std::string& s) {
  comma();
  out_ += json_quote(s);
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(const char* s) { return value(std::string(s != nullptr ? s : "")); }
JsonWriter& JsonWriter::value(int64_t v) {
  comma();
  out_ += std::to_string(v);
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(double v) {
  comma();
  char buf[32];
  // JSON has no NaN or Inf: those become null.
  if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
    out_ += "null";
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out_ += buf;
  }
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(bool v) {
  comma();
  out_ += v ? "true" : "false";
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::null() {
  comma();
  out_ += "null";
  need_comma_ = true;
  return *this;
}

}  // namespace tsimpl

// ---- status and memory: the C ABI over the objects above ----

extern "C" {

const char* ts_status_message(const ts_status* s) noexcept { return s == nullptr ? "" : s->message.c_str(); }
int32_t ts_status_code(const ts_status* s) noexcept { return s == nullptr ? TS_CODE_OK : s->code; }
const char* ts_status_op(const ts_status* s) noexcept { return s == nullptr ? "" : s->op.c_str(); }
const char* ts_status_reason(const ts_status* s) noexcept { return s == nullptr ? "" : s->reason.c_str(); }
int32_t ts_status_errno(const ts_status* s) noexcept { return s == nullptr ? 0 : s->sys_errno; }
void ts_status_free(ts_status* s) noexcept {
  if (!tsimpl::is_static_status(s)) delete s;
}
void ts_free(void* p) noexcept { std::free(p); }

}  // extern "C"
