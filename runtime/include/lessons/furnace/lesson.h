// furnace/lesson.h: guided lessons (lessons/FORMAT.md): loading and validating a lesson folder,
// its text in English and Chinese as parsed Markdown, running each step's action on the runtime
// and evaluating the step's checks against the values the action produced. The CLI (`furnace
// lesson`), the tests and the visualizer's lesson panel all use this API; nothing here prints or
// draws (the terminal renderer is the CLI's, the pixel wrap the visualizer's).
//
// [SECTION] languages and text  [SECTION] Markdown  [SECTION] values  [SECTION] step setups  [SECTION] lessons
// [SECTION] loading  [SECTION] actions  [SECTION] checks and predictions  [SECTION] a lesson run
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "furnace/train.h"  // defines: Scenario, TraceBus

namespace furnace::lesson {

// ---- [SECTION] languages and text ---------------------------------------------------------------

enum class Lang : uint8_t { en, zh };
inline constexpr Lang kLangs[] = {Lang::en, Lang::zh};
const char* lang_name(Lang lang);        // "en", "zh"
Lang parse_lang(std::string_view text);  // "en" | "zh"; throws one line for anything else

// A string in both languages.
struct Text {
  std::string en, zh;
  const std::string& in(Lang lang) const { return lang == Lang::zh ? zh : en; }
};

// ---- [SECTION] Markdown -------------------------------------------------------------------------

// A run of inline text with one style.
struct Span {
  enum Style : uint8_t { plain = 0, strong = 1, emphasis = 2, code = 4, link = 8 };
  std::string text;
  uint8_t style = plain;  // a bit set of Style
  std::string href;       // for links
};

// One block of a document, flattened: list items and quotes carry their depth.
struct Block {
  enum class Kind : uint8_t { heading, paragraph, code, list_item, rule };
  Kind kind = Kind::paragraph;
  int level = 0;        // heading: 1-6; list_item: nesting depth from 1
  int number = 0;       // list_item: its number in an ordered list, 0 in a bullet list
  int quote_depth = 0;  // inside how many block quotes
  std::vector<Span> spans;  // heading, paragraph, list_item (the item's own first paragraph;
                            // later paragraphs of the item are paragraphs at its depth)
  std::string code;         // code: the verbatim text, ending with '\n'
  std::string info;         // code: the fence's info string ("python", "bash", ...)
  int line = 0;             // 1-based line in the source file
};

struct Document {
  std::vector<Block> blocks;
};

// Parses CommonMark with md4c. Tables, images and raw HTML are rejected: throws furnace::Error
// "<origin>:<line>: <what> is not supported in lesson text".
Document parse_markdown(std::string_view markdown, const std::string& origin);

// The plain text of some spans (no styling), e.g. for a heading.
std::string spans_text(const std::vector<Span>& spans);
// Drawing a Document is its reader's: the terminal's in runtime/cli/lesson_text.h, the Lesson
// panel's in visualizer/ui/; both break lines by furnace/cjk_text.h.

// ---- [SECTION] values ---------------------------------------------------------------------------

// What an observable holds: a number (integer or not), a boolean, a string, or an array of values.
struct Value {
  enum class Type : uint8_t { number, boolean, string, array };
  Type type = Type::number;
  double number = 0;
  bool integer = false;  // a count or a size: printed without a fraction
  bool boolean = false;
  std::string string;
  std::vector<Value> items;

  static Value of_int(int64_t v);
  static Value of_number(double v);
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  static Value of_array(std::vector<Value> v);
  template <class T>
  static Value of_ints(const std::vector<T>& v) {
    std::vector<Value> out;
    for (const T& x : v) out.push_back(of_int(static_cast<int64_t>(x)));
    return of_array(std::move(out));
  }
  static Value of_numbers(const std::vector<double>& v);
  static Value of_strings(const std::vector<std::string>& v);
};
// "4", "0.5", "true", "cuda:0 = GPU 2", "[3, 3, 3, 1]"; large byte counts as "1610612736".
std::string format_value(const Value& v);
bool values_equal(const Value& a, const Value& b);

// What an action produced: observable name -> value ("error" and "warnings" always present).
using Observables = std::map<std::string, Value>;

// ---- [SECTION] step setups ----------------------------------------------------------------------

// What a step's action runs: one type per action, each holding only what its action reads. Every
// one has `scenario`, a train Scenario with the lesson defaults of FORMAT.md and the file's keys
// applied: the machine and the process's environment, and the whole experiment where the action
// trains (the visualizer starts it as it is). Which keys each action reads: actions(); how each
// key is read: runtime/src/lessons/step_setup.cpp.
struct DevicesSetup {
  Scenario scenario;                                     // topology, env
  std::optional<std::string> set_visible_before_init{};  // os.environ[...] before first device use
  std::optional<std::string> set_visible_after_init{};   // ... after it (no effect)
  std::optional<int> set_device{};                       // torch.cuda.set_device(N)
};
struct ForwardSetup {
  Scenario scenario;                 // topology, env, parallel, device, device_ids, batch, hidden, ...
  std::string model_device{};        // "cpu" or "cuda:N" ("": cuda:<device>)
  std::string input_device = "cpu";  // where the input batch is
};
struct TrainSetup {
  Scenario scenario;  // the training run
};
struct MemorySetup {
  Scenario scenario;                 // topology, device
  std::vector<std::string> alloc{};  // sizes to allocate, in order ("5MiB")
  std::vector<int> free{};           // indices into alloc to free afterwards
  bool empty_cache = false;
};
struct LossTrapSetup {
  Scenario scenario;  // topology, env, batch, device_ids, seed
};
struct ScalerSetup {
  Scenario scenario;                   // steps, GradScaler's options
  std::vector<int64_t> overflow_at{};  // 1-based steps whose gradients overflow
};
struct MachineSetup {
  Scenario scenario;    // topology
  std::string story{};  // furnace/stories.h
  int part = 1;         // 1-based
};
struct LoaderSetup {
  Scenario scenario;  // batch, workers, prefetch_factor, pin_memory, seed
};
// In the order of actions().
using ActionSetup = std::variant<DevicesSetup, ForwardSetup, TrainSetup, MemorySetup, LossTrapSetup, ScalerSetup,
                                 MachineSetup, LoaderSetup>;

struct StepSetup {
  ActionSetup action;
  std::vector<std::string> keys;  // the keys the file set, in FORMAT.md's order

  // The Scenario every action's setup holds.
  const Scenario& scenario() const {
    return std::visit([](const auto& a) -> const Scenario& { return a.scenario; }, action);
  }
  Scenario& scenario() {
    return std::visit([](auto& a) -> Scenario& { return a.scenario; }, action);
  }
  // The setup of action T, or nullptr when the step runs another action.
  template <class T>
  const T* as() const { return std::get_if<T>(&action); }
  template <class T>
  T* as() { return std::get_if<T>(&action); }
};

// The setup of `action` ("devices", ...) with the lesson defaults of FORMAT.md and no key set;
// throws for an unknown action.
StepSetup default_setup(std::string_view action);

// ---- [SECTION] lessons --------------------------------------------------------------------------

struct Expectation {
  enum class Op : uint8_t { equals, not_equals, less_than, greater_than, at_most, at_least, approx,
                            contains, not_contains };
  Op op = Op::equals;
  Value literal;                  // the expected value, unless `of` is set
  std::optional<std::string> of;  // { of = "OBSERVABLE", times = k }: another observable's value
  double times = 1;
};
const char* expectation_name(Expectation::Op op);  // "equals", "at_least", ...

struct Check {
  std::string observable;  // NAME, NAME[i], STEP.NAME or STEP.NAME[i]
  std::vector<Expectation> expectations;
  double rel_tol = 1e-6, abs_tol = 0;  // for approx
  Text claim;
  int line = 0;
};

struct Prediction {
  Text question;
  std::string observable;
  std::vector<std::string> choices;
  int line = 0;
};

struct Step {
  std::string id;
  std::string panel;   // devices | step_flow | memory | training | timeline | controls
  std::string action;  // devices | forward | train | memory | dp-loss-trap | scaler | machine | loader
  StepSetup setup;     // what the action runs
  std::optional<Prediction> prediction;
  std::vector<Check> checks;
  Text title;          // from the `## ... {#id}` headings of en.md and zh.md
  Document text_en, text_zh;
  int line = 0;        // of its [[step]] in lesson.toml
  const Document& text(Lang lang) const { return lang == Lang::zh ? text_zh : text_en; }
};

struct Lesson {
  std::string id;         // = the folder name
  std::string dir;        // the folder
  int order = 0;
  Text title, summary;
  std::string article_section;
  std::vector<int> pitfalls;
  Document intro_en, intro_zh;  // the text before the first step
  std::vector<Step> steps;

  const Document& intro(Lang lang) const { return lang == Lang::zh ? intro_zh : intro_en; }
  // The step with that id, or nullptr.
  const Step* find_step(std::string_view id) const;
  // Its index, or -1.
  int step_index(std::string_view id) const;
};

// ---- [SECTION] loading --------------------------------------------------------------------------

// The lessons folder: `override_dir` if not empty, else $FURNACE_LESSONS_DIR, else the lessons/
// folder of the source tree this library was built from.
std::string lessons_dir(const std::string& override_dir = "");

// Loads and validates one lesson folder (lesson.toml, en.md, zh.md). Every problem throws
// furnace::Error with one line "<file>:<line>:<column>: <problem>" (column omitted where unknown).
Lesson load_lesson(const std::string& folder);

// The Fashion-MNIST slice the lessons train on (2,000 images): $FURNACE_DATA_DIR/fashion-mnist,
// else the source tree's data/fashion-mnist. A step's Scenario leaves data_dir empty for it.
std::string lesson_data_dir();

// Every lesson folder in `dir` (sub-folders holding a lesson.toml), sorted by `order`. A folder
// that fails to load is skipped and its error line appended to `errors`; with `errors` null the
// first error is thrown. Duplicate orders or ids are errors too.
std::vector<Lesson> load_lessons(const std::string& dir, std::vector<std::string>* errors = nullptr);

// ---- [SECTION] actions --------------------------------------------------------------------------

struct ObservableInfo {
  std::string name;
  Value::Type type;
  Value::Type item_type = Value::Type::number;  // for arrays
};

struct ActionInfo {
  std::string name;
  std::string description;
  std::vector<std::string> keys;           // scenario keys it reads
  std::vector<ObservableInfo> observables; // besides "error" and "warnings"
};

// Every action, in FORMAT.md's order.
const std::vector<ActionInfo>& actions();
const ActionInfo* find_action(std::string_view name);
// The panels a step may name.
const std::vector<std::string>& panels();

// One line saying what a step runs (step_setup.cpp): the action and the scenario keys the file sets, e.g.
// "devices: topology workstation-4x3090, CUDA_VISIBLE_DEVICES=0" (code, mostly; its few words in `lang`).
std::string scenario_summary(const Step& step, Lang lang = Lang::en);

// Runs a step's action on the simulator. Never throws for what the scenario provokes: an error
// the runtime raises becomes the "error" observable (and every other observable is absent).
// `trace`, when given, receives the runtime's events (train and forward).
Observables run_action(const Step& step, TraceBus* trace = nullptr);

// ---- [SECTION] checks and predictions -----------------------------------------------------------

// Why a reference has no value, kept apart from how it is said (describe_missing, either language).
struct Missing {
  enum class Kind : uint8_t {
    step_not_run,     // STEP.NAME: step `name` has not run
    action_failed,    // the action failed (`detail`: its error), so `name` was not produced
    not_produced,     // the action ran and did not produce `name`
    not_an_element,   // NAME[i] where NAME is no array
    out_of_range,     // NAME[i] past the end (`detail`: the array, `count` its length)
    times_not_number  // { of = NAME, times = k } where NAME is no number
  };
  Kind kind = Kind::not_produced;
  std::string name, detail;
  size_t count = 0;
};
std::string describe_missing(const Missing& m, Lang lang);

// Observable lookup: "NAME", "NAME[i]"; `earlier` holds earlier steps' observables by step id for
// "STEP.NAME". Returns nullopt and sets `why` when it is not there.
std::optional<Value> lookup(const std::string& ref, const Observables& own,
                            const std::map<std::string, Observables>& earlier, Missing* why);

// How a check came out: what it compared, kept as values, so that detail() says it in either
// language (the CLI's evidence line, the visualizer's lesson panel).
struct CheckResult {
  // One expectation, compared.
  struct Compared {
    Expectation expectation;        // a copy: a result may outlive the check it came from
    std::optional<Value> resolved;  // `of`'s value (times applied), for { of = ... }
    // Why a numeric comparison could not be made (none: it was made, passed or not).
    enum class Why : uint8_t { none, empty_array, not_a_number, expected_not_a_number } why = Why::none;
  };
  const Check* check = nullptr;
  bool pass = false;
  std::string actual;              // the observed value, formatted ("" when missing)
  std::vector<Compared> compared;  // every expectation, in order; empty when a value was missing
  std::optional<Missing> missing;  // why the check could not be evaluated
  std::string missing_of;          // the expectation's `of` that was missing ("": the observable itself)
  // "expected at_least 2, less_than 5" / "应当至少 2, 小于 5", or why it could not be evaluated.
  std::string detail(Lang lang = Lang::en) const;
};
CheckResult evaluate_check(const Check& check, const Observables& own,
                           const std::map<std::string, Observables>& earlier);

struct PredictionResult {
  std::string answer;              // the real value, formatted ("" when missing)
  std::optional<Missing> missing;  // why there is none
  bool among_choices = true;       // false: the lesson's choices do not include the real answer
  // The answer as shown: the value, or "(why there is none)" in `lang`.
  std::string shown(Lang lang) const { return missing ? "(" + describe_missing(*missing, lang) + ")" : answer; }
};
PredictionResult prediction_answer(const Prediction& p, const Observables& own);
// Whether a learner's answer matches the real value (FORMAT.md, "Predictions"): case, spaces,
// brackets and quotes ignored; numbers compared as numbers; a choice may be given by its letter.
bool answer_matches(const Prediction& p, const Value& real, std::string_view answer);
// The label a terminal shows before choice `index`: "a", "b", ...
std::string choice_label(size_t index);
// The choice an answer names, by its letter or typed as it is shown; nullopt: none of them (an
// answer to a question with choices that the terminal asks again).
std::optional<size_t> chosen(const Prediction& p, std::string_view answer);
// Whether a wrong answer is called wrong: not for an open question (no choices) answered by a
// message, "What happens?" -> "Invalid device id", where "it fails" is a fair answer that no
// comparison can judge. Such an answer is shown next to the real one instead.
bool answer_is_judged(const Prediction& p, const Value& real);

// ---- [SECTION] a lesson run ---------------------------------------------------------------------

struct StepOutcome {
  Observables observables;
  std::vector<CheckResult> checks;
  std::optional<PredictionResult> prediction;
  bool passed = false;  // every check passed and the prediction's answer is among its choices
  double wall_s = 0;
};

// Runs a lesson's steps in any order (next, back, jump), each at most once, running first the
// earlier steps a step's checks refer to. Not thread-safe; one per lesson being followed.
class LessonRun {
 public:
  explicit LessonRun(const Lesson& lesson, TraceBus* trace = nullptr);
  const Lesson& lesson() const { return lesson_; }
  // Runs step `index` (0-based) if it has not run yet, and evaluates its checks.
  const StepOutcome& run_step(size_t index);
  bool has_run(size_t index) const;
  // Forgets every result (the next run_step runs again).
  void reset();

 private:
  const Lesson& lesson_;
  TraceBus* trace_;
  std::map<size_t, StepOutcome> done_;
};

}  // namespace furnace::lesson
