#pragma once
/// Parsing and printing of the quantities on the command line: byte sizes and batch-size lists.
#include <cstdint>
#include <string>
#include <vector>

namespace batchwise {

/// Parses a byte size: "2GiB", "512MiB", "1.5GB", "4096", "2G" (binary for bare K/M/G/T).
/// `what` names the input in the error message (e.g. "--memory-budget").
/// REQUIRES: a positive size. Throws ConfigError otherwise.
int64_t parse_bytes(const std::string& text, const std::string& what);

/// Formats bytes in binary units with three significant digits: "1.50 GiB", "812 KiB", "12 B".
std::string format_bytes(int64_t bytes);
/// `bytes` rounded down to a tenth of its unit, as a flag reads it back: "22.6GiB" where
/// format_bytes, which rounds to the nearest, would say more than there is ("79.2 GiB" of 79.18).
std::string format_bytes_at_most(int64_t bytes);

/// A number rounded to an integer with thousands separators: 12345.6 -> "12,346"; from 1e15 on, or
/// not finite, three significant digits ("1e+300", "inf").
std::string format_grouped(double value);

/// A percentage with one decimal, "62.5 %"; below 0.1 (but above 0) "< 0.1 %", not a misleading 0.0.
std::string format_percent(double percent);

/// A time a person reads: whole seconds from 10 s ("57 s"), two significant digits below ("3.4 s",
/// "0.083 s"), so that a run of a small dataset does not read "0 s".
std::string format_seconds(double seconds);
/// The same figure without its unit, for a table's column of seconds: "57", "3.4", "0.083".
std::string format_seconds_figure(double seconds);

/// A loss for a table: "0.2368" (four decimals), a diverging one in four significant digits ("1.515e+19", not
/// 26 digits past the column), "not finite" where it is not a number.
std::string format_loss(double loss);

/// A number of epochs a person reads, to `significant` digits: "1 epoch", "0.55 epochs", "35 epochs".
std::string format_epochs(double epochs, int significant = 6);

/// Parses a batch-size list "16,32,64" or a range "first-last*factor" / "first-last+step"
/// (llama-bench syntax; "8-4096*2" is 8, 16, ..., 4096). Lists and ranges may be mixed with
/// commas. The result is sorted and unique. Throws ConfigError naming `what` on malformed input and
/// on more than kMaxBatchSizes sizes (counted before a range is expanded).
constexpr int64_t kMaxBatchSizes = 1024;
std::vector<int64_t> parse_batch_sizes(const std::string& text, const std::string& what);

/// Parses a shape "3x32x32" (or "784") into its dimensions, each at least 1. Throws ConfigError
/// naming `what` otherwise.
std::vector<int64_t> parse_shape(const std::string& text, const std::string& what);

/// `first`, 2 x first, 4 x first, ... below `last`, then `last` itself: tune's sweep sizes (with
/// `first` a multiple of --multiple-of, every size is one).
std::vector<int64_t> doublings(int64_t first, int64_t last);

/// The median of `values` (the mean of the middle two for an even count). REQUIRES: not empty.
double median(std::vector<double> values);

/// The `q` quantile of `values`, interpolated linearly between order statistics (numpy's default).
/// REQUIRES: not empty, 0 <= q <= 1.
double quantile(std::vector<double> values, double q);

}  // namespace batchwise
