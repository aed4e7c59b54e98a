// The catalogue of the CLI's common error lines in Chinese (cli/error_messages.h).
#include "error_messages.h"

#include <string_view>
#include <utility>
#include <vector>

namespace furnace::cli {
namespace {

// English template -> Chinese template, each "{}" standing for the same text in both, in order.
const std::vector<std::pair<std::string, std::string>>& zh_catalogue() {
  static const std::vector<std::pair<std::string, std::string>> lines = {
      // The longer line first: the shorter one's last "{}" would take the rest of it.
      {"no lesson '{}' (lessons: {}); lessons that do not load are not listed (`furnace lesson list` says why)",
       "没有叫 '{}' 的课程（现有的课程：{}）；无法载入的课程不在其中（`furnace lesson list` 会说明原因）"},
      {"no lesson '{}' (lessons: {})", "没有叫 '{}' 的课程（现有的课程：{}）"},
      {"--step {}: lesson {} has steps 1..{}", "--step {}：课程 {} 只有第 1 到第 {} 步"},
      {"lesson check: give a lesson id or --all (not both)",
       "lesson check：要么给出一个课程 id，要么用 --all（两者只能选一个）"},
      {"lesson: say 'furnace lesson list', 'furnace lesson run ID' or 'furnace lesson check --all'",
       "lesson：请用 'furnace lesson list'、'furnace lesson run ID' 或 'furnace lesson check --all'"},
      {"no lessons in {}", "{} 里没有课程"},
      {"{}: the lessons folder does not exist (set FURNACE_LESSONS_DIR or --lessons-dir)",
       "{}：课程文件夹不存在（请设置 FURNACE_LESSONS_DIR 或使用 --lessons-dir）"},
      {"Fashion-MNIST not found in {}: install it with 'apt-get install dataset-fashion-mnist', or pass "
       "--data DIR (a small slice ships in data/fashion-mnist)",
       "在 {} 里找不到 Fashion-MNIST：用 'apt-get install dataset-fashion-mnist' 安装，或者用 --data DIR "
       "指定目录（data/fashion-mnist 里自带一小份）"},
      {"out of host memory: {}", "主机内存不足：{}"},
  };
  return lines;
}

// Matches `text` against `pattern` ("{}" matches any text, the shortest that lets the rest
// match); the matched pieces in `parts`.
bool match(std::string_view pattern, std::string_view text, std::vector<std::string>& parts) {
  const size_t hole = pattern.find("{}");
  if (hole == std::string_view::npos) return pattern == text;
  if (text.substr(0, hole) != pattern.substr(0, hole)) return false;
  const std::string_view rest = pattern.substr(hole + 2);
  const size_t next_hole = rest.find("{}");
  const std::string_view literal = rest.substr(0, next_hole);
  for (size_t at = hole; at <= text.size(); ++at) {
    if (text.substr(at, literal.size()) != literal) continue;
    if (literal.empty() && next_hole == std::string_view::npos) at = text.size();  // a final "{}"
    parts.emplace_back(text.substr(hole, at - hole));
    if (match(rest, text.substr(at), parts)) return true;
    parts.pop_back();
    if (literal.empty() && next_hole == std::string_view::npos) break;
  }
  return false;
}

std::string fill(const std::string& pattern, const std::vector<std::string>& parts) {
  std::string out;
  size_t start = 0, i = 0;
  for (size_t hole; (hole = pattern.find("{}", start)) != std::string::npos; start = hole + 2)
    out += pattern.substr(start, hole - start) + (i < parts.size() ? parts[i++] : std::string());
  return out + pattern.substr(start);
}

}  // namespace

std::string translate_error(const std::string& english, lesson::Lang lang) {
  if (lang != lesson::Lang::zh) return english;
  for (const auto& [en, zh] : zh_catalogue()) {
    std::vector<std::string> parts;
    if (match(en, english, parts)) return fill(zh, parts);
  }
  return english;
}

std::string error_prefix(lesson::Lang lang) {
  return lang == lesson::Lang::zh ? "furnace：错误：" : "furnace: error: ";
}

}  // namespace furnace::cli
