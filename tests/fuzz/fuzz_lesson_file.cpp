// libFuzzer target for lesson folders (lessons/NN-name/: lesson.toml, en.md, zh.md; FORMAT.md) as
// load_lesson reads them (runtime/src/lessons/lesson_file.cpp and step_setup.cpp): the TOML (through toml_ascii and toml++,
// compiled in), every step's [step.scenario] table (the scenario a step runs: topology, env,
// DataParallel, AMP, sizes, stories) and the Scenario checks behind it, the checks and
// predictions with their observable references, and how en.md / zh.md attach to the steps.
//
// An input is one lesson: its lesson.toml, then optionally "\n%%en.md\n" and the English text,
// then "\n%%zh.md\n" and the Chinese text (missing parts are empty files). The folder is named
// after the file's id (when that is a plain name), so a real lesson and its mutants pass the
// "id equals the folder name" check and reach the rest. An input is accepted as a lesson that
// keeps FORMAT.md's promises, or rejected with one clear line.
#include <unistd.h>  // defines: getpid

#include <algorithm>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>

#include "furnace/lesson.h"
#include "furnace/stories.h"  // declares: stories
#include "fuzz_common.h"

namespace furnace::lesson::detail {
// The loader never runs an action: these stand in for the runtime at link time (the actions
// need the whole simulator) and abort if ever called.
[[noreturn]] void never_run() {
  fuzz::require(false, "load_lesson does not run actions");
  std::abort();
}
void run_devices(const DevicesSetup&, Observables&) { never_run(); }
void run_forward(const ForwardSetup&, Observables&, TraceBus*) { never_run(); }
void run_train(const TrainSetup&, Observables&, TraceBus*) { never_run(); }
void run_memory(const MemorySetup&, Observables&) { never_run(); }
void run_loss_trap(const LossTrapSetup&, Observables&) { never_run(); }
void run_scaler(const ScalerSetup&, Observables&) { never_run(); }
void run_machine(const MachineSetup&, Observables&) { never_run(); }
void run_loader(const LoaderSetup&, Observables&) { never_run(); }
}  // namespace furnace::lesson::detail

namespace furnace {
// The story names of runtime/src/lessons/stories.cpp (which runs them on the simulator,
// so it is not compiled in): a lesson's `story` key is checked against these.
std::vector<std::pair<std::string, std::string>> stories() {
  return {{"two-jobs", ""}, {"select-gpu", ""}};
}
}  // namespace furnace

namespace {

namespace fs = std::filesystem;
using namespace furnace;
using namespace furnace::lesson;
using fuzz::require;

// The value of the first line `id = "..."`, when it is a plain folder name; else "01-fuzz".
std::string folder_name(std::string_view toml) {
  for (size_t at = 0; at < toml.size();) {
    const size_t end = std::min(toml.find('\n', at), toml.size());
    const std::string_view line = toml.substr(at, end - at);
    at = end + 1;
    if (line.rfind("id = \"", 0) != 0 || line.size() < 7 || line.back() != '"') continue;
    const std::string_view id = line.substr(6, line.size() - 7);
    const bool plain = !id.empty() && id.size() <= 64 && id != "." && id != ".." &&
                       std::all_of(id.begin(), id.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
                       });
    return plain ? std::string(id) : "01-fuzz";
  }
  return "01-fuzz";
}

void write(const fs::path& p, std::string_view text) { std::ofstream(p, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size())); }

bool filled(const Text& t) { return !t.en.empty() && !t.zh.empty(); }

void check(const Lesson& l, const std::string& folder) {
  require(l.id == folder, "the id is the folder name");
  require(filled(l.title) && filled(l.summary), "title and summary in both languages");
  for (int p : l.pitfalls) require(p >= 1 && p <= 17, "pitfalls in 1..17");
  require(!l.steps.empty(), "at least one step");
  std::set<std::string> ids;
  bool predicts = false;
  for (const Step& s : l.steps) {
    require(!s.id.empty() && ids.insert(s.id).second, "step ids unique");
    require(std::find(panels().begin(), panels().end(), s.panel) != panels().end(), "a known panel");
    const ActionInfo* action = find_action(s.action);
    require(action != nullptr, "a known action");
    for (const std::string& k : s.setup.keys)
      require(std::find(action->keys.begin(), action->keys.end(), k) != action->keys.end(),
              "every scenario key is one the action reads");
    require(fuzz::accepts([&] { s.setup.scenario().validate(); }), "the step's Scenario is valid");
    require(!s.checks.empty(), "every step checks something");
    for (const Check& c : s.checks) {
      require(!c.expectations.empty() && !c.observable.empty(), "a check has an observable and an expectation");
      require(filled(c.claim), "a check's claim in both languages");
    }
    if (s.prediction) {
      predicts = true;
      require(filled(s.prediction->question), "a prediction's question in both languages");
      require(s.prediction->choices.empty() || s.prediction->choices.size() >= 2, "no choice, or two or more");
    }
    require(filled(s.title), "each step has a title in both languages");
    require(!s.text_en.blocks.empty() && !s.text_zh.blocks.empty(), "each step has text in both languages");
    require(!scenario_summary(s).empty(), "the step's summary");
  }
  require(predicts, "a lesson asks at least one prediction");
}

// A folder of this process's own, removed at exit.
const fs::path& work_root() {
  static const fs::path root = fs::temp_directory_path() / ("furnace-fuzz-lesson-" + std::to_string(::getpid()));
  static const int cleanup = std::atexit([] {
    std::error_code ec;
    fs::remove_all(work_root(), ec);
  });
  (void)cleanup;
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& root = work_root();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t en_at = input.find("\n%%en.md\n");
  const size_t zh_at = input.find("\n%%zh.md\n", en_at == std::string_view::npos ? 0 : en_at);
  const std::string_view toml = input.substr(0, std::min(en_at, zh_at));
  const std::string_view en = en_at == std::string_view::npos ? "" : input.substr(en_at + 9, zh_at == std::string_view::npos ? std::string_view::npos : zh_at - en_at - 9);
  const std::string_view zh = zh_at == std::string_view::npos ? "" : input.substr(zh_at + 9);

  const std::string name = folder_name(toml);
  fs::remove_all(root);
  fs::create_directories(root / name);
  write(root / name / "lesson.toml", toml);
  write(root / name / "en.md", en);
  write(root / name / "zh.md", zh);

  Lesson lesson;
  if (fuzz::accepts([&] { lesson = load_lesson((root / name).string()); })) check(lesson, name);
  return 0;
}
