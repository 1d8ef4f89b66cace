// The shim's leaf helpers: status objects, strings, dtype names, quantized-engine names, one
// JSON reader and one JSON writer. No torch headers: every other translation unit includes this
// file, and this file includes nothing of theirs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "torchspeed.h"

struct ts_status {
  int32_t code;
  std::string op;
  std::string reason;
  std::string message;  // "op: reason"
  int32_t sys_errno = 0;  // TS_CODE_IO: the errno of the failed call
  // The preallocated out-of-memory status, which ts_status_free must not delete. A flag, not an
  // address: the test library (csrc/testing) has its own, freed through this library's function.
  bool preallocated = false;
};

namespace tsimpl {

// A status with a code. Never throws: when the status itself cannot be allocated it returns the
// preallocated out-of-memory status, which ts_status_free recognises by its flag.
ts_status* make_status(int32_t code, const char* op, const char* reason) noexcept;
ts_status* make_status(int32_t code, const char* op, const std::string& reason) noexcept;
// The message as "op: reason" (TS_CODE_MODEL_ERROR): the form older code builds by hand.
ts_status* make_status(const std::string& message) noexcept;
// The preallocated out-of-memory status.
ts_status* oom_status() noexcept;
// A TS_CODE_IO status carrying errno (so callers can tell a full disk from a missing folder).
ts_status* io_status(const char* op, const std::string& reason, int err) noexcept;
bool is_static_status(const ts_status* s) noexcept;

// An exception that carries its ts_code to TS_API_END. Throw it (through fail) where the
// failure's kind is known; other exceptions are classified by their C++ type.
class CodedError : public std::runtime_error {
 public:
  CodedError(int32_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  int32_t code() const noexcept { return code_; }

 private:
  int32_t code_;
};

[[noreturn]] void fail(int32_t code, const std::string& msg);

// Copies a std::string into malloc'ed, NUL-terminated memory released by ts_free.
char* dup_string(const std::string& s);

// s cut to at most max bytes, with how much was cut: values echoed in messages stay short.
std::string clip(const std::string& s, size_t max = 200);

// The TS_* dtype code's name ("float32", ...), or "dtype(N)".
std::string dtype_name(int32_t code);

// Quantized engine names, as PyTorch spells them in Python, by c10::QEngine value (the enum's
// values are fixed: NoQEngine 0, FBGEMM 1, QNNPACK 2, ONEDNN 3, X86 4).
const char* engine_name_of(int value) noexcept;

// ---- JSON ----

struct JValue {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<JValue> arr;
  std::vector<std::pair<std::string, JValue>> obj;  // in document order

  const JValue* get(const std::string& key) const;
};

// Parses text as one JSON value; throws CodedError(TS_CODE_INVALID_ARGUMENT) naming `what` and
// the offset. Nesting deeper than 64 levels is refused (hostile input must not blow the stack).
JValue parse_json(const std::string& text, const std::string& what);

std::string json_escape(const std::string& s);
std::string json_quote(const std::string& s);

// Builds one JSON document; commas are placed by the writer.
class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(const std::string& k);
  JsonWriter& value(const std::string& s);
  JsonWriter& value(const char* s);
  JsonWriter& value(int64_t v);
  JsonWriter& value(double v);
  JsonWriter& value(bool v);
  JsonWriter& null();
  const std::string& str() const { return out_; }

 private:
  void comma();
  std::string out_;
  bool need_comma_ = false;
};

}  // namespace tsimpl
