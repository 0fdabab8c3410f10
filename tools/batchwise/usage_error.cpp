// CLI11's parse errors in batchwise's words: one line naming the option or word at fault, the nearest option where a
// flag is misspelt, and where --cmd was given without "--", where it goes.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace batchwise::cli {

namespace {

// Edits between two words (insertions, deletions, substitutions), for the nearest option's name.
size_t edits(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

namespace {
std::string usage_error_core(const std::string& what, const CLI::App* sub);
}  // namespace

// A --cmd given without "--": the command's own flag CLI11 did not know is the likely cause ("--batch-size: no such
// option of sweep" had not said that the command needed -- before it)
std::string usage_error_text(const std::string& what, const CLI::App* sub) {
  const std::string text = usage_error_core(what, sub);
  if (!command_separator_missing()) return text;
  return text + "; with --cmd, put -- right before your command, or its own flags are read as batchwise's";
}

namespace {
std::string usage_error_core(const std::string& what, const CLI::App* sub) {
  std::smatch m;
  static const std::regex at_most(R"(^(.+): At Most (\d+) required but received (\d+)$)");
  static const std::regex at_least(R"(^(.+): At least (\d+) required but received (\d+)$)");
  static const std::regex unexpected(R"(^The following argument was not expected: (\S+)$)");
  static const std::regex excludes(R"(^(\S+) excludes (\S+)$)");
  if (std::regex_match(what, m, excludes))
    return fmt::format("{} and {} exclude each other; give one of them", m[1].str(), m[2].str());
  // A positional given one value too many ("a.json b.json --html x.html"): CLI11 took the loose value
  // for a positional and counts it, where the word to name is the option it does not know
  std::string loose_option;
  if (std::regex_match(what, m, at_most) && sub)
    for (const std::string& word : sub->remaining())
      if (word.rfind('-', 0) == 0 && loose_option.empty()) loose_option = word;
  if (loose_option.empty() && std::regex_match(what, m, at_most))
    return m[2] == "1" ? fmt::format("{}: given {} times; give it once", m[1].str(), m[3].str())
                       : fmt::format("{}: takes at most {} values, got {}", m[1].str(), m[2].str(), m[3].str());
  if (std::regex_match(what, m, at_least))
    return fmt::format("{}: needs {} values, got {}", m[1].str(), m[2].str(), m[3].str());
  // Several ("x.html --html"): the first that is an option names what went wrong (its value came loose).
  // Not the "--" before a --cmd command, which CLI11 lists first ("-- -v" for `fit --cmd -v -- ...`,
  // where fit has no -v): in the order given, the first option it left over
  static const std::regex several(R"(^The following arguments were not expected: (.+)$)");
  const auto is_option = [](const std::string& word) { return word.rfind('-', 0) == 0 && word != "--"; };
  std::string first_option = loose_option;
  if (first_option.empty() && sub && (std::regex_match(what, m, several) || std::regex_match(what, m, unexpected)))
    for (const std::string& word : sub->remaining()) {
      if (word == "--") break;  // the command's own options follow it (`--batch-size` had been blamed)
      if (is_option(word)) {
        first_option = word;
        break;
      }
    }
  // A word before a --cmd command's "--" is taken as the command, and CLI11 then lists the command's words (its
  // options among them) as not expected: the word before "--" is what to name
  const CLI::Option* command = nullptr;
  if (sub)
    for (const CLI::Option* option : sub->get_options())
      if (option->get_name() == "command") command = option;
  if (first_option.empty() && command && command->count() > 0 && std::regex_match(what, m, several))
    return fmt::format("{}: a word before -- that {} does not take; your command follows -- whole",
                       fmt::join(command->results(), " "), sub->get_name());
  if (first_option.empty() && std::regex_match(what, m, several) && sub) {
    std::istringstream words(m[1].str());
    for (std::string word; words >> word;)
      if (is_option(word)) {
        first_option = word;
        break;
      }
    if (first_option.empty())
      return fmt::format("unexpected arguments {}: {} takes no more", m[1].str(), sub->get_name());
  }
  if (first_option.empty() && std::regex_match(what, m, unexpected) && sub &&
      m[1].str().rfind('-', 0) != 0)  // a word, not an option
    return fmt::format("unexpected argument {}: {} takes no more", m[1].str(), sub->get_name());
  if (!first_option.empty() || (std::regex_match(what, m, unexpected) && sub)) {
    const std::string given = first_option.empty() ? m[1].str() : first_option, name = given.substr(0, given.find('='));
    std::string nearest;
    size_t best = 3;  // at most two edits away
    for (const CLI::Option* option : sub->get_options([](const CLI::Option* o) { return o->nonpositional(); }))
      for (const std::string& flag : option->get_lnames())
        if (const size_t d = edits(name, "--" + flag); d < best) best = d, nearest = "--" + flag;
    return fmt::format("{}: no such option of {}{}", given, sub->get_name(),
                       nearest.empty() ? "" : fmt::format("; did you mean {}", nearest));
  }
  return what;
}
}  // namespace

}  // namespace batchwise::cli
