#pragma once
/// The vocabulary of the records' field lists: the report schema, declared once.
///
/// Each record a report holds lists, beside its struct, the JSON fields it is written as, in JSON
/// order, as a template over a visitor:
///
///   template <class V, class T, IfRecord<T, StateBytes> = 0>
///   void fields(V& v, T& s) {
///     v("parameter_bytes", s.parameter_bytes);
///     ...
///   }
///
/// The visitor is the JSON writer or the JSON reader (src/report/schema.cpp), the only code that knows
/// JSON; this header knows neither, so an engine header that includes it includes no reporting code.
/// T is the record or the const record (the writer reads a const one). A visitor offers:
///
///   v(name, member)                      numbers, booleans, strings, enums (their to_string spelling),
///                                        optionals (null when empty), vectors (arrays), and records
///                                        that have a field list of their own (objects)
///   v(name, member, When{cond})          written only when cond holds, absent otherwise
///   v(name, member, NullUnless{cond})    written as null unless cond holds
///   v.object(name, fn)                   a nested object of this record's members: fn(v) lists them
///   v.object(name, When{cond}, fn)       the same, present only when cond holds
///   v.computed(name, value)              written, never read: a figure derived from the members
///   v.property(name, record, get, set[, cond])
///                                        written as get(record), read back through set(record, value):
///                                        members the JSON holds in another shape (generic lambdas
///                                        that take the record, so the const record never meets set)
///
/// Conditions only decide what is written; the reader reads whatever is there. A missing or null
/// field keeps the member's default, so reports from older versions still load; a field of the
/// wrong type is a DataError naming the report and the field. An enum member needs, beside its
/// enum, to_string(E) and enum_values(E) (every value, for the reader to parse the spelling back).
///
/// To add a field: add the member to its struct and its line to the struct's field list (in the
/// place it takes in the JSON), and document it in docs/report-schema.md.
#include <type_traits>

namespace batchwise {

/// Enables a record's field list for the record and its const (`IfRecord<T, Trial> = 0`).
template <class T, class Record>
using IfRecord = std::enable_if_t<std::is_same_v<std::remove_const_t<T>, Record>, int>;

/// A field written only when `write` holds; absent otherwise.
struct When {
  bool write;
};

/// A field written as null unless `value` holds (a figure that means nothing for this record).
struct NullUnless {
  bool value;
};

}  // namespace batchwise
