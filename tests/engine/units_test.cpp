#include "batchwise/units.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "batchwise/error.h"
#include "batchwise/log_throttle.h"

namespace batchwise {
namespace {

TEST(ParseBytes, BinaryAndDecimalUnits) {
  EXPECT_EQ(parse_bytes("2GiB", "--memory-budget"), 2147483648LL);
  EXPECT_EQ(parse_bytes("512MiB", "x"), 536870912LL);
  EXPECT_EQ(parse_bytes("1.5GB", "x"), 1500000000LL);
  EXPECT_EQ(parse_bytes("4096", "x"), 4096);
  EXPECT_EQ(parse_bytes("2G", "x"), 2147483648LL);
  EXPECT_EQ(parse_bytes("64 kib", "x"), 65536);
}

TEST(ParseBytes, MalformedSizeNamesTheFlagAndTheFix) {
  try {
    parse_bytes("2XB", "--memory-budget");
    FAIL() << "2XB parsed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--memory-budget: unknown unit 'XB' in '2XB'; use a number with an optional unit, like "
                 "2GiB, 512MiB or 1.5GB");
  }
  EXPECT_THROW(parse_bytes("GiB", "x"), ConfigError);
  EXPECT_THROW(parse_bytes("-1GiB", "x"), ConfigError);
  EXPECT_THROW(parse_bytes("0", "x"), ConfigError);
}

// A size that rounds to no bytes is refused: a budget of 0 reads as none given, and the device's
// default would replace it unseen. A number past a double's range is named as such, not as a unit.
TEST(ParseBytes, LessThanAByteOrPastTheRangeIsRefusedAsSuch) {
  for (const char* text : {"0.4", "0.4B", "1e-12GiB"}) {
    try {
      parse_bytes(text, "--memory-budget");
      FAIL() << text << " parsed";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("--memory-budget: '{}' is less than a byte; give a size of at "
                                                   "least 1B, like 2GiB",
                                                   text));
    }
  }
  for (const char* text : {"0.6", "1.5B"}) {  // once read as 1 and 2 bytes, and named so in later messages
    try {
      parse_bytes(text, "--memory-budget");
      FAIL() << text << " parsed";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("--memory-budget: '{}' is not a whole number of bytes; give whole "
                                                   "bytes or a unit, like 1.5GiB",
                                                   text));
    }
  }
  EXPECT_EQ(parse_bytes("1.5KiB", "x"), 1536);
  EXPECT_EQ(parse_bytes(" 4 GiB\n", "x"), int64_t{4} << 30);  // spaces around it, and before its unit
  try {
    parse_bytes("1e400GiB", "--memory-budget");
    FAIL() << "1e400GiB parsed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--memory-budget: '1e400GiB' is not a size: its number '1e400' is malformed or out of range; use a "
                 "number with an optional unit, like 2GiB, 512MiB or 1.5GB (at most 7EiB)");
  }
  EXPECT_THROW(parse_bytes("1.2.3GiB", "x"), ConfigError);
  // The most the messages name parses (its E is the unit's, not an exponent), and a larger size names it
  EXPECT_EQ(parse_bytes("7EiB", "x"), 7 * (int64_t{1} << 60));
  EXPECT_EQ(parse_bytes("1PiB", "x"), int64_t{1} << 50);
  EXPECT_EQ(parse_bytes("2e3", "x"), 2000);
  try {
    parse_bytes("8EiB", "--memory-budget");
    FAIL() << "8EiB parsed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--memory-budget: '8EiB' is too large; give at most 7EiB (a device's memory, e.g. 80GiB)");
  }
}

TEST(FormatBytes, ThreeSignificantDigits) {
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(4000000), "3.81 MiB");
  EXPECT_EQ(format_bytes(1610612736), "1.50 GiB");
  EXPECT_EQ(format_bytes(812 * 1024), "812 KiB");
  // Three figures of the value as rounded, in the unit it rounds to.
  EXPECT_EQ(format_bytes(1048575), "1.00 MiB");
  EXPECT_EQ(format_bytes(10485750), "10.0 MiB");
  EXPECT_EQ(format_bytes(104805172), "100 MiB");  // 99.95 MiB
  EXPECT_EQ(format_bytes(1023 * 1024 + 1000), "1.00 MiB");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

// Rounded down, as a flag takes it back: never more than there is (an H100's 79.18 GiB is not 79.2).
TEST(FormatBytes, AtMostRoundsDownAndParsesBack) {
  const int64_t h100 = static_cast<int64_t>(79.18 * 1024 * 1024 * 1024);
  EXPECT_EQ(format_bytes(h100), "79.2 GiB");
  EXPECT_EQ(format_bytes_at_most(h100), "79.1GiB");
  EXPECT_LE(parse_bytes(format_bytes_at_most(h100), "x"), h100);
  EXPECT_EQ(format_bytes_at_most(812 * 1024), "812.0KiB");
  EXPECT_EQ(format_bytes_at_most(12), "12B");
}

// A small dataset's whole run can take under a second: it reads so, not "0 s".
// Thousands separators for any real figure; a figure no run makes (a program's own report of
// samples_per_s=1e300) in three significant digits, not 300 of them.
TEST(FormatGrouped, ThousandsSeparatorsAndNoColumnOfDigits) {
  EXPECT_EQ(format_grouped(12345.6), "12,346");
  EXPECT_EQ(format_grouped(-1234), "-1,234");
  EXPECT_EQ(format_grouped(-0.2), "0");
  EXPECT_EQ(format_grouped(999999999999999), "999,999,999,999,999");
  EXPECT_EQ(format_grouped(1e300), "1e+300");
  EXPECT_EQ(format_grouped(std::numeric_limits<double>::infinity()), "inf");
}

TEST(FormatSeconds, WholeSecondsFromTenTwoSignificantDigitsBelow) {
  EXPECT_EQ(format_seconds(57.4), "57 s");
  EXPECT_EQ(format_seconds(9.6), "10 s");
  EXPECT_EQ(format_seconds(3.42), "3.4 s");
  EXPECT_EQ(format_seconds(0.4), "0.4 s");
  EXPECT_EQ(format_seconds(0.0834), "0.083 s");
  EXPECT_EQ(format_seconds_figure(3.42), "3.4");  // a table's column
}

// "full runs of 1 epoch", not "1 epochs"; the word follows the figure as printed.
TEST(FormatEpochs, OneEpochIsSingular) {
  EXPECT_EQ(format_epochs(1), "1 epoch");
  EXPECT_EQ(format_epochs(35), "35 epochs");
  EXPECT_EQ(format_epochs(0.55), "0.55 epochs");
  EXPECT_EQ(format_epochs(1.004, 2), "1 epoch");
  EXPECT_EQ(format_epochs(0.328, 2), "0.33 epochs");
}

TEST(ParseBatchSizes, ListsAndRanges) {
  EXPECT_EQ(parse_batch_sizes("16,32,64", "x"), (std::vector<int64_t>{16, 32, 64}));
  EXPECT_EQ(parse_batch_sizes("8-64*2", "x"), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(parse_batch_sizes("8-4096*2", "x").size(), 10u);
  EXPECT_EQ(parse_batch_sizes("10-40+10", "x"), (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(parse_batch_sizes("64,8-16*2,8", "x"), (std::vector<int64_t>{8, 16, 64}));
  EXPECT_EQ(parse_batch_sizes("3-20*3", "x"), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(parse_batch_sizes("1-1073741824*999999999", "x"), (std::vector<int64_t>{1, 999999999}));
  EXPECT_EQ(parse_batch_sizes("5-1073741824+1073741810", "x"), (std::vector<int64_t>{5, 1073741815}));
  // leading zeros are no size, as --max 010 is 10 (0000000000001 had been "too large")
  EXPECT_EQ(parse_batch_sizes("0000000000001,00000000000000000032", "x"), (std::vector<int64_t>{1, 32}));
  EXPECT_THROW(parse_batch_sizes("0000000000000", "x"), ConfigError);  // still 0
}

TEST(ParseBatchSizes, MalformedInputIsAConfigError) {
  EXPECT_THROW(parse_batch_sizes("", "--batch-sizes"), ConfigError);
  EXPECT_THROW(parse_batch_sizes("16,,32", "--batch-sizes"), ConfigError);
  EXPECT_THROW(parse_batch_sizes("0,4", "--batch-sizes"), ConfigError);
  EXPECT_THROW(parse_batch_sizes("64-8*2", "--range"), ConfigError);
  EXPECT_THROW(parse_batch_sizes("8-64*1", "--range"), ConfigError);
  EXPECT_THROW(parse_batch_sizes("abc", "--range"), ConfigError);
}

// A range is counted before it is expanded: 10^12 sizes is a message, not std::bad_alloc.
// A negative size says so (it once read "'' is not a batch size in '-4'"), and --seq-len's
// messages speak of lengths.
TEST(ParseBatchSizes, ANegativeSizeOrLengthSaysSo) {
  auto message = [](const std::string& text, const std::string& what) {
    try {
      (void)parse_batch_sizes(text, what);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("-4", "--seq-len"),
            "--seq-len: '-4' is negative: sequence lengths start at 1; use a length like 64 or a range like 32-128");
  EXPECT_EQ(
      message("16,-8", "--batch-sizes"),
      "--batch-sizes: '-8' is negative: batch sizes start at 1; use a list like 16,32,64 or a range like 8-4096*2");
  EXPECT_EQ(message("abc", "--seq-len"),
            "--seq-len: 'abc' is not a sequence length in 'abc'; use a length like 64 or a range like 32-128");
  EXPECT_EQ(message("0", "--seq-len"), "--seq-len: sequence lengths start at 1, got '0'");
  // --batch's bound: 10^11 built its index for minutes, holding gigabytes, before it failed.
  EXPECT_EQ(message("64,99999999999", "--batch-sizes"),
            "--batch-sizes: 99999999999 in '64,99999999999' is more than the most batchwise takes, 1073741824");
  EXPECT_EQ(message("8-2000000000*2", "--batch-sizes"),
            "--batch-sizes: 2000000000 in '8-2000000000*2' is more than the most batchwise takes, 1073741824");
  EXPECT_EQ(parse_batch_sizes("1073741824", "--batch-sizes"), (std::vector<int64_t>{1073741824}));
}

TEST(ParseBatchSizes, AHugeRangeIsRefusedBeforeItIsExpanded) {
  try {
    parse_batch_sizes("1-999999999+1", "--batch-sizes");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--batch-sizes: range '1-999999999+1' is 999999999 batch sizes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_batch_sizes("1-2000+1", "--batch-sizes"), ConfigError);
  EXPECT_EQ(parse_batch_sizes("1-1024+1", "--batch-sizes").size(), 1024u);
}

TEST(Doublings, UpToAndIncludingTheLast) {
  EXPECT_EQ(doublings(1, 16), (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(doublings(3, 20), (std::vector<int64_t>{3, 6, 12, 20}));
  EXPECT_EQ(doublings(12, 96), (std::vector<int64_t>{12, 24, 48, 96}));
  EXPECT_EQ(doublings(5, 5), (std::vector<int64_t>{5}));
}

// A log's lines of a long pass (the CLI without a terminal, the Python callback): a key's first line,
// then one every 10 s while it stays; another key passes at once. On an injected clock.
TEST(LogThrottle, PassesAKeysFirstLineThenOneEveryPeriod) {
  double now = 100;
  LogThrottle log(10, [&now] { return now; });
  EXPECT_TRUE(log.pass("validate 0"));
  now = 101;
  EXPECT_FALSE(log.pass("validate 0"));
  now = 109.9;
  EXPECT_FALSE(log.pass("validate 0"));
  now = 110;
  EXPECT_TRUE(log.pass("validate 0"));  // the period is counted from the last line passed
  now = 111;
  EXPECT_TRUE(log.pass("validate 1"));  // another key: at once
  EXPECT_FALSE(log.pass("validate 1"));
  EXPECT_TRUE(log.pass("validate 0"));  // back to the first key: another key came between
  now = 120.5;
  EXPECT_FALSE(log.pass("validate 0"));  // and its period starts again from there (111)
  now = 121;
  EXPECT_TRUE(log.pass("validate 0"));
}

// Without an injected clock it reads the steady clock: an hour's period holds a repeated key back on
// any machine, however slow, and lets another key through.
TEST(LogThrottle, ReadsTheSteadyClockWhenNoneIsGiven) {
  LogThrottle log(3600);
  EXPECT_TRUE(log.pass("race 1 0"));
  EXPECT_FALSE(log.pass("race 1 0"));
  EXPECT_TRUE(log.pass("race 1 1"));
}

TEST(LogThrottle, TheFirstLineOfAnyKeyPassesTheEmptyOneToo) {
  double now = 0;  // a clock at zero: no period has passed since any "last" line
  LogThrottle log(10, [&now] { return now; });
  EXPECT_TRUE(log.pass(""));
  EXPECT_FALSE(log.pass(""));
}

}  // namespace
}  // namespace batchwise

TEST(Units, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(batchwise::median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(batchwise::median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(batchwise::median({7}), 7);
}
