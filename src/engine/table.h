#pragma once
// The engine's tables of built-in things (models, datasets): a row found by its name, the names in
// the table's order, and a list of them in words. Private to src/engine/.
#include <string>
#include <vector>

namespace batchwise::detail {

/// The row of `rows` named `name`, or nullptr.
template <class Row>
const Row* find_by_name(const std::vector<Row>& rows, const std::string& name) {
  for (const Row& row : rows)
    if (row.name == name) return &row;
  return nullptr;
}

/// "a", "a and b", "a, b and c".
inline std::string and_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

/// The names of `rows`, in their order.
template <class Row>
std::vector<std::string> names_of(const std::vector<Row>& rows) {
  std::vector<std::string> names;
  for (const Row& row : rows) names.push_back(row.name);
  return names;
}

}  // namespace batchwise::detail
