// The JSON report, written and read back through the records' field lists (fields.h): the one place
// that knows JSON. Each record's fields are declared once, beside its struct; the writer and the reader
// here walk those lists, so a field added there is written and read with no change here.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <regex>
#include <string>
#include <type_traits>
#include <vector>

#include "batchwise/report.h"
#include "check.h"

namespace batchwise {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T, class A>
struct IsVector<std::vector<T, A>> : std::true_type {};

class JsonWriter;
// A record: a type with a field list (found by argument-dependent lookup, beside the record).
template <class T, class = void>
struct HasFields : std::false_type {};
template <class T>
struct HasFields<T, std::void_t<decltype(fields(std::declval<JsonWriter&>(), std::declval<const T&>()))>>
    : std::true_type {};

// Writes a record's fields into one JSON object, in the order its field list gives them (ordered_json
// keeps insertion order).
class JsonWriter {
 public:
  template <class M>
  void operator()(const char* name, const M& member) {
    out_[name] = value(member);
  }
  template <class M>
  void operator()(const char* name, const M& member, When when) {
    if (when.write) out_[name] = value(member);
  }
  template <class M>
  void operator()(const char* name, const M& member, NullUnless unless) {
    out_[name] = unless.value ? value(member) : ordered_json();
  }
  template <class F>
  void object(const char* name, F&& list) {
    object(name, When{true}, list);
  }
  template <class F>
  void object(const char* name, When when, F&& list) {
    if (!when.write) return;
    JsonWriter nested;
    list(nested);
    out_[name] = std::move(nested.out_);
  }
  template <class M>
  void computed(const char* name, const M& value) {
    (*this)(name, value);
  }
  template <class R, class G, class S>
  void property(const char* name, const R& record, G&& get, S&& /*set*/) {
    (*this)(name, get(record));
  }
  template <class R, class G, class S, class C>
  void property(const char* name, const R& record, G&& get, S&& /*set*/, C condition) {
    (*this)(name, get(record), condition);
  }

  template <class M>
  static ordered_json value(const M& m) {
    if constexpr (std::is_enum_v<M>) {
      return to_string(m);
    } else if constexpr (IsOptional<M>::value) {
      return m ? value(*m) : ordered_json();  // nlohmann writes a non-finite number as null too
    } else if constexpr (IsVector<M>::value) {
      ordered_json a = ordered_json::array();
      for (const auto& x : m) a.push_back(value(x));
      return a;
    } else if constexpr (HasFields<M>::value) {
      JsonWriter w;
      fields(w, m);
      return std::move(w.out_);
    } else {
      return ordered_json(m);
    }
  }

 private:
  ordered_json out_ = ordered_json::object();
};

// Reads a record's fields from one JSON object. Lenient about what is missing (a field absent or null
// keeps the member's default: older reports load), strict about types (a DataError naming the report
// and the field's path, e.g. "fit.trials[2].batch").
class JsonReader {
 public:
  JsonReader(const json& object, const std::string& source, std::string path)
      : object_(object), source_(source), path_(std::move(path)) {}

  template <class M>
  void operator()(const char* name, M& member) {
    const json* v = find(name);
    if (v) read(*v, member, at(name));
    // a trial's, point's or run's batch is checked absent too: its default, 0, would not read back (fuzzing)
    if (const auto floor = least(name, path_); v || (floor && *floor > 0)) at_least(member, floor, at(name), !v);
  }
  template <class M, class C>
  void operator()(const char* name, M& member, C /*written when*/) {
    (*this)(name, member);
  }
  template <class F>
  void object(const char* name, F&& list) {
    const json* v = find(name);
    if (!v) return;
    expect(v->is_object(), *v, at(name), "an object");
    JsonReader nested(*v, source_, at(name));
    list(nested);
  }
  template <class F>
  void object(const char* name, When /*written when*/, F&& list) {
    object(name, list);
  }
  template <class M>
  void computed(const char* /*name*/, const M& /*value*/) {}
  template <class R, class G, class S>
  void property(const char* name, R& record, G&& get, S&& set) {
    const auto it = object_.find(name);  // a null is read too: a number JSON cannot hold (a loss not finite)
    if (it == object_.end()) return;
    std::decay_t<decltype(get(record))> x{};
    read(*it, x, at(name));
    set(record, std::move(x));
  }
  template <class R, class G, class S, class C>
  void property(const char* name, R& record, G&& get, S&& set, C /*written when*/) {
    property(name, record, get, set);
  }

  template <class M>
  void read(const json& j, M& m, const std::string& path) const {
    if (j.is_null()) {  // null: nothing measured; the member keeps its default
      if constexpr (IsOptional<M>::value) m.reset();
      return;
    }
    if constexpr (std::is_same_v<M, bool>) {
      expect(j.is_boolean(), j, path, "true or false");
      m = j.get<bool>();
    } else if constexpr (std::is_integral_v<M>) {
      m = integer<M>(j, path);
    } else if constexpr (std::is_floating_point_v<M>) {
      expect(j.is_number(), j, path, "a number");
      m = j.get<M>();
    } else if constexpr (std::is_same_v<M, std::string>) {
      expect(j.is_string(), j, path, "a string");
      m = j.get<std::string>();
    } else if constexpr (std::is_enum_v<M>) {
      m = spelling<M>(j, path);
    } else if constexpr (IsOptional<M>::value) {
      if (!m) m.emplace();
      read(j, *m, path);
    } else if constexpr (IsVector<M>::value) {
      expect(j.is_array(), j, path, "an array");
      m.clear();
      m.resize(j.size());
      for (size_t i = 0; i < j.size(); ++i) read(j[i], m[i], fmt::format("{}[{}]", path, i));
    } else {
      static_assert(HasFields<M>::value, "a report member must be a number, string, enum, optional, vector or record");
      expect(j.is_object(), j, path, "an object");
      JsonReader nested(j, source_, path);
      fields(nested, m);
    }
  }

 private:
  const json* find(const char* name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string at(const char* name) const { return path_.empty() ? name : path_ + "." + name; }

  void expect(bool ok, const json& j, const std::string& path, const std::string& what) const {
    if (ok) return;
    std::string found = j.dump(-1, ' ', false, json::error_handler_t::replace);
    if (found.size() > 40) found = found.substr(0, 37) + "...";
    BATCHWISE_CHECK(false, DataError, "{}: {}: expected {}, found {}; give a report written with --json", source_, path,
                    what, found);
  }

  template <class M>
  M integer(const json& j, const std::string& path) const {
    expect(j.is_number_integer(), j, path, "an integer");
    const bool fits = j.is_number_unsigned()
                          ? j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<M>::max())
                          : j.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<M>::min()) &&
                                j.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<M>::max());
    expect(fits, j, path, "an integer in range");
    return static_cast<M>(j.is_number_unsigned() ? static_cast<int64_t>(j.get<uint64_t>()) : j.get<int64_t>());
  }

  // The least value a run writes under this name in the record at `within`, where there is one: a trial's, a point's
  // or a run's batch (a record in a list) is 1 or more, any other batch, a peak, a budget or a throughput 0 or more
  // (0: none, where a field has no null); a hand-edited batch of 0 or -16 had been drawn on the charts' log axis
  static std::optional<double> least(const std::string& name, const std::string& within) {
    static const std::regex batch("(^|_)batch(es)?$");
    static const std::regex positive(
        "^(samples_per_s.*|peak_bytes|peak_allocated_bytes|budget_bytes|train_s|eval_s|wall_s|threads|cores)$");
    // the answers' batches too: "recommended B 0" had been shown for a hand-edited 0
    static const std::regex answer("^(best_batch|fastest_batch)$");
    if (std::regex_match(name, answer)) return 1.0;
    if (name == "batch" && !within.empty() && (within.back() == ']' || within == "recommendation")) return 1.0;
    if (std::regex_search(name, batch) || std::regex_match(name, positive)) return 0.0;
    return std::nullopt;
  }

  template <class M>
  void at_least(const M& m, std::optional<double> least, const std::string& path, bool absent = false) const {
    if (!least) return;
    if constexpr (IsOptional<M>::value) {
      if (m) at_least(*m, least, path, absent);
    } else if constexpr (IsVector<M>::value) {
      for (size_t i = 0; i < m.size(); ++i) at_least(m[i], least, fmt::format("{}[{}]", path, i));
    } else if constexpr (std::is_arithmetic_v<M> && !std::is_same_v<M, bool>) {
      BATCHWISE_CHECK(!(static_cast<double>(m) < *least), DataError,
                      "{}: {}: expected {}, found {}; give a report written with --json", source_, path,
                      *least > 0 ? "a batch of 1 or more" : "0 or more", absent ? "none" : fmt::format("{}", m));
    }
  }

  template <class E>
  E spelling(const json& j, const std::string& path) const {
    std::vector<std::string> names;
    for (E e : enum_values(E{})) {
      if (j.is_string() && j.get<std::string>() == to_string(e)) return e;
      names.push_back(to_string(e));
    }
    expect(false, j, path, fmt::format("one of {}", fmt::join(names, ", ")));
    return E{};
  }

  const json& object_;
  const std::string& source_;
  std::string path_;
};

}  // namespace

std::string to_json(const Report& report) {
  return JsonWriter::value(report).dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Report report_from_json(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // The parser's words without its "[json.exception.parse_error.101] " tag, and bytes that are not printable
    // ASCII (a binary file's, or text that is not UTF-8) as '?': they had gone to the terminal raw
    std::string what = e.what();
    if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
      what = what.substr(what.find("] ") + 2);
    for (char& c : what)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    BATCHWISE_CHECK(false, DataError, "{}: not JSON ({}); give a report written with --json", name, what);
  }
  const bool versioned = j.is_object() && j.contains("schema_version"),
             context = j.is_object() && j.contains("context");
  // `doctor --json` writes its findings, not a report of trials: named, where "give a report written with --json" had
  // told the user to do what they had done
  BATCHWISE_CHECK(
      versioned || !(j.is_object() && j.contains("findings") && j.contains("cpu")), DataError,
      "{}: a doctor's findings (`batchwise doctor --json`), not a run's report: it has no trials to draw or "
      "compare; give a report of fit, sweep, tune, validate, noise, loader or plan written with --json",
      name);
  BATCHWISE_CHECK(versioned && context, DataError,
                  "{}: not a batchwise report (no {}); give a report written with --json", name,
                  !versioned && !context ? "schema_version and context"
                  : versioned            ? "context"
                                         : "schema_version");
  BATCHWISE_CHECK(j["schema_version"].is_string(), DataError,
                  "{}: schema_version is {}, not a string (\"1\" in a report written with --json); give a report "
                  "written with --json",
                  name, j["schema_version"].dump());
  BATCHWISE_CHECK(j["schema_version"] == "1", DataError,
                  "{}: report schema {} is not one this batchwise reads (\"1\"); use the batchwise that wrote it", name,
                  j["schema_version"].dump());
  Report r;
  JsonReader(j, name, "").read(j, r, "");
  // Copies the JSON keeps once, at the top: the fit's and the sweep's budget and target.
  if (r.fit) {
    r.fit->budget_bytes = r.budget_bytes;
    r.fit->target = r.target;
  }
  if (r.sweep) r.sweep->budget_bytes = r.budget_bytes;
  // A noise scale without its band (no run writes one so; fuzzing found one): the band from its error, as
  // measure_noise_scale sets it, else the band's [0, 0] would read back as unbounded once written
  if (r.noise && r.noise->b_simple && r.noise->b_simple_low == 0 && r.noise->b_simple_high == 0) {
    r.noise->b_simple_low = std::max(0.0, *r.noise->b_simple - 2 * r.noise->b_simple_stderr);
    r.noise->b_simple_high = *r.noise->b_simple + 2 * r.noise->b_simple_stderr;
  }
  return r;
}

}  // namespace batchwise
