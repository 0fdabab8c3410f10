// The CSV reader: RFC 4180 records, a header or none, numbers in any locale, the label column by name
// or position, every fault named by its line and column.
#include <ATen/Functions.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "batchwise/data.h"
#include "batchwise/memory.h"
#include "check.h"
#include "engine/data_readers.h"
#include "parse_number.h"

namespace batchwise {

using detail::base_name;
using detail::kMaxClasses;
using detail::read_file;
using detail::require_finite;
using detail::set_targets;

namespace {

// CSV records per RFC 4180: fields separated by commas; a field in double quotes may hold commas,
// line breaks and "" (one quote); records end at CRLF, LF or the end of the file. Beyond the RFC:
// spaces and tabs around a field are dropped, and lines holding nothing but them are skipped.
class CsvReader {
 public:
  CsvReader(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  /// The next record's fields; false at the end of the file. Throws DataError naming the line and
  /// column (0-based, as --label-column counts) of a malformed quote.
  bool next(std::vector<std::string>& fields) {
    fields.clear();
    skip_blank_lines();
    if (pos_ >= text_.size()) return false;
    record_line_ = line_;
    for (;;) {
      fields.push_back(field(fields.size()));
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      end_line();
      return true;
    }
  }
  /// The line the last record began on (1-based).
  int64_t line() const { return record_line_; }

 private:
  static bool blank(char c) { return c == ' ' || c == '\t'; }
  bool at_line_end(size_t p) const { return p >= text_.size() || text_[p] == '\n' || text_[p] == '\r'; }
  size_t character(size_t p) const { return p - line_start_ + 1; }

  void end_line() {  // at CRLF, LF, a lone CR or the end
    if (pos_ < text_.size() && text_[pos_] == '\r') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '\n') ++pos_;
    ++line_;
    line_start_ = pos_;
  }

  void skip_blank_lines() {
    for (;;) {
      size_t p = pos_;
      while (p < text_.size() && blank(text_[p])) ++p;
      if (p >= text_.size() || !at_line_end(p)) return;
      pos_ = p;
      end_line();
    }
  }

  std::string field(size_t column) {
    size_t p = pos_;
    while (p < text_.size() && blank(text_[p])) ++p;
    std::string out;
    if (p < text_.size() && text_[p] == '"') {
      const int64_t open_line = line_;
      const size_t open_at = character(p);
      for (++p;; ++p) {
        BATCHWISE_CHECK(p < text_.size(), DataError,
                        "{} line {}, column {} (character {}): a quoted field opens here and is never closed; end it "
                        "with a quote (a quote inside a quoted field is written \"\")",
                        path_, open_line, column, open_at);
        const char c = text_[p];
        if (c == '"') {
          if (p + 1 < text_.size() && text_[p + 1] == '"') {
            out += '"';
            ++p;
            continue;
          }
          ++p;
          break;
        }
        if (c == '\n') {
          ++line_;
          line_start_ = p + 1;
        }
        out += c;
      }
      while (p < text_.size() && blank(text_[p])) ++p;
      BATCHWISE_CHECK(at_line_end(p) || text_[p] == ',', DataError,
                      "{} line {}, column {} (character {}): '{}' after the closing quote; a quoted field ends at its "
                      "closing quote, and a quote inside it is written \"\"",
                      path_, line_, column, character(p), text_[p]);
    } else {
      const size_t begin = p;
      while (!at_line_end(p) && text_[p] != ',') {
        BATCHWISE_CHECK(text_[p] != '"', DataError,
                        "{} line {}, column {} (character {}): a quote inside an unquoted field; quote the whole field "
                        "and write the quote as \"\"",
                        path_, line_, column, character(p));
        ++p;
      }
      size_t end = p;
      while (end > begin && blank(text_[end - 1])) --end;
      out.assign(text_.substr(begin, end - begin));
    }
    pos_ = p;
    return out;
  }

  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0, line_start_ = 0;
  int64_t line_ = 1, record_line_ = 1;
};

// The label's column: --label-column by header name (one column of it) or by index; without it, the last.
size_t label_index(const std::vector<std::string>& header, const std::string& label_column, const std::string& path,
                   size_t columns) {
  if (label_column.empty()) return columns - 1;
  const auto named = std::find(header.begin(), header.end(), label_column);
  BATCHWISE_CHECK(named == header.end() || std::count(named, header.end(), label_column) == 1, ConfigError,
                  "--label-column {}: {} has {} columns of that name (the first is column {}); give the label's "
                  "index (0-{})",
                  label_column, path, std::count(header.begin(), header.end(), label_column), named - header.begin(),
                  columns - 1);
  if (named != header.end()) return static_cast<size_t>(named - header.begin());
  double index = -1;
  BATCHWISE_CHECK(detail::parse_double(label_column, index) && index >= 0 && index < static_cast<double>(columns) &&
                      index == std::floor(index),
                  ConfigError, "--label-column {}: {} has no such column; give a header name{} or an index 0-{}",
                  label_column, path, header.empty() ? "" : " (" + fmt::format("{}", fmt::join(header, ", ")) + ")",
                  columns - 1);
  return static_cast<size_t>(index);
}

}  // namespace

Dataset load_csv(const std::string& path, const std::string& label_column, TargetKind kind) {
  std::string text = read_file(path);
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // a UTF-8 byte-order mark
  // Another format's file, given as CSV: said so, not "a quote inside an unquoted field" somewhere in it.
  BATCHWISE_CHECK(text.compare(0, 6, "\x93NUMPY") != 0, DataError,
                  "{}: a .npy file, not CSV; give --dataset npy with --data-file FEATURES.npy --labels-file LABELS.npy",
                  path);
  BATCHWISE_CHECK(text.compare(0, 2, "\x1f\x8b") != 0, DataError,
                  "{}: a gzip file, not CSV; IDX files (.gz or not) are --dataset idx, with --data-file and "
                  "--labels-file; a compressed CSV is read once unpacked (gunzip)",
                  path);
  // Numbers in one format whatever the locale ("1.5", never "1,5": the comma separates fields).
  auto number = [](const std::string& cell, double& out) {
    size_t b = 0, e = cell.size();
    while (b < e && (cell[b] == ' ' || cell[b] == '\t')) ++b;
    while (e > b && (cell[e - 1] == ' ' || cell[e - 1] == '\t')) --e;
    return detail::parse_double(std::string_view(cell).substr(b, e - b), out);
  };
  std::vector<std::string> header, cells;
  std::vector<double> values;
  size_t columns = 0;
  int64_t rows = 0;
  std::vector<int64_t> row_lines;  // each data row's line, for a label's fault found after the reading
  CsvReader reader(path, text);
  std::string foreign;  // a first row of one cell holding ';' or a tab: another separator than the comma
  while (reader.next(cells)) {
    const int64_t line_no = reader.line();
    double v = 0;
    if (columns == 0) {
      columns = cells.size();
      const char* separator = columns > 1                                ? nullptr
                              : cells[0].find(';') != std::string::npos  ? "';'"
                              : cells[0].find('\t') != std::string::npos ? "tab"
                                                                         : nullptr;
      if (separator)
        foreign = fmt::format(
            "; the file looks {}-separated, and batchwise reads comma-separated values: convert it "
            "(the decimal separator is '.')",
            separator);
      // A first row of names is the header; one of numbers, data. One that mixes them is neither: a data row
      // with a typo had been taken for a header, and its sample dropped unsaid.
      std::vector<size_t> numeric, named;
      for (size_t c = 0; c < cells.size(); ++c) (number(cells[c], v) ? numeric : named).push_back(c);
      BATCHWISE_CHECK(numeric.empty() || named.empty(), DataError,
                      "{} line 1: column {} ('{}') is not a number and column {} ('{}') is: a header names every "
                      "column (none a number), a data row holds a number in each; fix that row (a header's numeric "
                      "name, such as '2020', renamed 'y2020')",
                      path, named.front(), cells[named.front()], numeric.front(), cells[numeric.front()]);
      if (numeric.empty()) {
        header = cells;
        continue;
      }
    }
    BATCHWISE_CHECK(cells.size() == columns, DataError, "{} line {}: {} columns, but the first row has {}{}", path,
                    line_no, cells.size(), columns,
                    foreign.empty() ? "; every row needs a value in each of the first row's columns (fill missing "
                                      "values; put a field that holds a comma in double quotes)"
                                    : foreign);
    for (size_t c = 0; c < cells.size(); ++c) {
      BATCHWISE_CHECK(number(cells[c], v), DataError, "{} line {}, column {}{}: '{}' is not a number{}", path, line_no,
                      c, header.empty() ? "" : " ('" + header[c] + "')", cells[c],
                      foreign.empty() ? "; every CSV column must be numeric (encode categories as integers, fill "
                                        "missing values; the decimal separator is '.')"
                                      : foreign);
      // Training reads float32: past its range a number would become infinite (named here, where its line is known)
      BATCHWISE_CHECK(!std::isfinite(v) || std::abs(v) <= std::numeric_limits<float>::max(), DataError,
                      "{} line {}, column {}{}: '{}' is beyond float32's range (about 3.4e38), the precision training "
                      "reads; rescale the column",
                      path, line_no, c, header.empty() ? "" : " ('" + header[c] + "')", cells[c]);
      values.push_back(v);
    }
    row_lines.push_back(line_no);
    ++rows;
  }
  BATCHWISE_CHECK(rows > 0, DataError, "{}: holds no data rows{}", path,
                  foreign.empty() ? "; give a CSV with a header line, then a row per sample" : foreign);
  BATCHWISE_CHECK(columns >= 2, DataError, "{}: needs at least two columns (features and a label), found {}", path,
                  columns);
  const size_t label = label_index(header, label_column, path, columns);
  UntrackedScope untracked;
  at::Tensor all = at::from_blob(values.data(), {rows, static_cast<int64_t>(columns)}, at::kDouble);
  std::vector<int64_t> keep;
  for (size_t c = 0; c < columns; ++c)
    if (c != label) keep.push_back(static_cast<int64_t>(c));
  Dataset d;
  d.name = base_name(path);
  for (const int64_t c : keep)
    if (!header.empty()) d.feature_names.push_back(header[static_cast<size_t>(c)]);
  d.inputs = all.index_select(1, at::tensor(keep, at::kLong)).to(at::kFloat);
  require_finite(d.inputs, path, "features");  // numbers beyond float32's range (1e39) became infinite
  at::Tensor labels = all.select(1, static_cast<int64_t>(label)).clone();
  if (kind == TargetKind::Values) require_finite(labels.to(at::kFloat), path, "targets");
  if (kind == TargetKind::Classes) {
    const std::string column = header.empty() ? std::to_string(label) : header[label];
    // The line of the first row where `bad` holds (a bool per row).
    const auto first_line = [&](const at::Tensor& bad) {
      return row_lines[static_cast<size_t>(bad.nonzero().select(1, 0)[0].item<int64_t>())];
    };
    const at::Tensor too_large = labels.abs().ge(static_cast<double>(kMaxClasses));
    BATCHWISE_CHECK(!too_large.any().item<bool>(), DataError,
                    "{}: label column {} holds values up to {:g} (the first at line {}); class labels run from 0 to "
                    "classes - 1 (at most {}): is this the label column (--label-column), or are these regression "
                    "targets (--loss mse)?",
                    path, column, labels.abs().max().item<double>(), first_line(too_large), kMaxClasses - 1);
    const at::Tensor fractional = labels.ne(labels.floor());
    BATCHWISE_CHECK(!fractional.any().item<bool>(), DataError,
                    "{}: label column {} holds fractional values ({} of its rows, the first at line {}: {:g}); class "
                    "labels must be whole numbers (or pass --loss mse for regression)",
                    path, column, fractional.sum().item<int64_t>(), first_line(fractional),
                    labels.masked_select(fractional)[0].item<double>());
    labels = labels.to(at::kLong);
  }
  set_targets(d, labels, kind, path);
  return d;
}

}  // namespace batchwise
