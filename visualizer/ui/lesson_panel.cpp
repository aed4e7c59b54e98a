// LessonPanel: the lesson list, then one lesson step by step. The text is the lesson's Markdown
// (lesson::Document blocks, drawn here), the prediction is asked before the step runs, and the
// checks come back from the lesson thread (LessonDriver) as PASS or FAIL per claim.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <string>
#include <string_view>

#include <imgui.h>
#include <imgui_stdlib.h>  // defines: ImGui::InputText for std::string

#include "furnace/unicode_text.h"  // defines: display_width
#include "panels.h"             // defines: LessonPanel
#include "theme.h"              // defines: colors::*
#include "wrap_text.h"          // defines: wrap_text

namespace furnace::viz {
namespace {

using lesson::Block;
using lesson::Lang;

constexpr std::string_view kNoBreakSpace = "\u00A0";

// Text wrapped at the window's edge by lesson::wrap_text. ImGui 1.86's TextWrapped breaks only at
// spaces and after ASCII punctuation: Chinese lines end at the last space, far from the edge, and
// `os.environ` is split at its dot. Later lines start where the first one does (after SameLine too);
// `hanging`: see lesson::wrap_text (code).
// Wrapped lines with their code spans drawn in the code colour instead of between backticks (the
// backticks were measured while wrapping, so a line stays within the edge). A span may continue
// on the next line.
void draw_with_code_spans(std::string_view lines) {
  const float x0 = ImGui::GetCursorPosX();  // after a list marker (SameLine): every line starts here
  bool code = false;
  size_t line_start = 0;
  while (line_start <= lines.size()) {
    if (line_start > 0) ImGui::SetCursorPosX(x0);
    size_t line_end = lines.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = lines.size();
    const std::string_view line = lines.substr(line_start, line_end - line_start);
    bool drawn = false;
    size_t from = 0;
    while (from <= line.size()) {
      size_t tick = line.find('`', from);
      if (tick == std::string_view::npos) tick = line.size();
      if (tick > from) {
        if (drawn) ImGui::SameLine(0, 0);
        if (code) ImGui::PushStyleColor(ImGuiCol_Text, colors::kPeak);
        ImGui::TextUnformatted(line.data() + from, line.data() + tick);
        if (code) ImGui::PopStyleColor();
        drawn = true;
      }
      if (tick == line.size()) break;
      code = !code;
      from = tick + 1;
    }
    if (!drawn) ImGui::TextUnformatted("");
    if (line_end == lines.size()) break;
    line_start = line_end + 1;
  }
}

void wrapped(const std::string& text, std::string_view hanging = {}, bool code_spans = false) {
  ImFont* font = ImGui::GetFont();
  const float size = ImGui::GetFontSize();
  const float width = std::max(ImGui::GetContentRegionAvail().x, size);
  std::string lines = lesson::wrap_text(text, width, [&](std::string_view s) {
    return static_cast<double>(font->CalcTextSizeA(size, FLT_MAX, 0.0f, s.data(), s.data() + s.size()).x);
  }, hanging);
  // U+00A0 held a code span together while wrapping; it is drawn as a plain space.
  for (size_t at = lines.find(kNoBreakSpace); at != std::string::npos; at = lines.find(kNoBreakSpace, at))
    lines.replace(at, kNoBreakSpace.size(), " ");
  if (code_spans)
    draw_with_code_spans(lines);
  else
    ImGui::TextUnformatted(lines.data(), lines.data() + lines.size());
}

// A paragraph or list item: its code spans in the code colour.
void wrapped_inline(const std::string& text) { wrapped(text, {}, true); }

void colored_wrapped(ImU32 color, const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, color);
  wrapped(text);
  ImGui::PopStyleColor();
}

// A paragraph's spans as one wrapped text; code spans keep their backticks, which mark them for
// wrapped_inline (and, when short, stay on one line: `device_ids=[1, 0]`), links their address.
std::string inline_text(const std::vector<lesson::Span>& spans) {
  std::string out;
  for (const lesson::Span& s : spans) {
    if (s.style & lesson::Span::code) {
      std::string code = s.text;
      if (furnace::display_width(code) <= 40)
        for (size_t at = code.find(' '); at != std::string::npos; at = code.find(' ', at))
          code.replace(at, 1, kNoBreakSpace);
      out += "`" + code + "`";
    } else {
      out += s.text;
    }
    if ((s.style & lesson::Span::link) && !s.href.empty() && s.href != s.text) out += " (" + s.href + ")";
  }
  return out;
}

void draw_document(const lesson::Document& doc) {
  for (const Block& b : doc.blocks) {
    const float indent = 14.0f * static_cast<float>(b.quote_depth + std::max(0, b.level - 1) *
                                                    (b.kind == Block::Kind::list_item ? 1 : 0));
    if (indent > 0) ImGui::Indent(indent);
    switch (b.kind) {
      case Block::Kind::heading:
        ImGui::Spacing();
        colored_wrapped(colors::kAccuracy, inline_text(b.spans));
        break;
      case Block::Kind::paragraph:
        if (b.quote_depth > 0)
          colored_wrapped(colors::kTextDim, inline_text(b.spans));
        else
          wrapped_inline(inline_text(b.spans));
        break;
      case Block::Kind::list_item: {
        char marker[16];
        if (b.number > 0)
          std::snprintf(marker, sizeof marker, "%d.", b.number);
        else
          std::snprintf(marker, sizeof marker, "-");
        ImGui::TextUnformatted(marker);
        ImGui::SameLine();
        wrapped_inline(inline_text(b.spans));
        break;
      }
      case Block::Kind::code: {
        ImGui::PushStyleColor(ImGuiCol_Text, colors::kPeak);
        std::string code = b.code;
        if (!code.empty() && code.back() == '\n') code.pop_back();
        ImGui::Indent(8.0f);
        wrapped(code, "    ");  // a long line wraps, indented, rather than running past the edge
        ImGui::Unindent(8.0f);
        ImGui::PopStyleColor();
        break;
      }
      case Block::Kind::rule:
        ImGui::Separator();
        break;
    }
    if (indent > 0) ImGui::Unindent(indent);
    ImGui::Spacing();
  }
}

void draw_list(AppState& app, const LessonView& v, Lang lang) {
  if (!v.lessons || v.lessons->empty())
    colored_wrapped(colors::kTextDim, lang == Lang::zh ? "没有找到课程（lessons/ 目录）。"
                                                       : "No lessons found (the lessons/ folder).");
  if (v.lessons) {
    for (size_t i = 0; i < v.lessons->size(); ++i) {
      const lesson::Lesson& l = (*v.lessons)[i];
      char label[256];
      std::snprintf(label, sizeof label, "%2d  %s##lesson%zu", l.order, l.title.in(lang).c_str(), i);
      if (ImGui::Selectable(label, false)) app.lesson.open_request = static_cast<int>(i);
      ImGui::Indent(28.0f);
      colored_wrapped(colors::kTextDim, l.summary.in(lang));
      ImGui::Unindent(28.0f);
    }
  }
  for (const std::string& e : v.load_errors) colored_wrapped(colors::kError, e);
}

// Step i's title, or where it has a prediction not yet answered by a run (`revealed` false),
// its number alone: a title often states what happens ("GPU 2 is called cuda:0").
std::string title_or_number(const lesson::Lesson& l, size_t i, bool revealed, bool zh) {
  const lesson::Step& step = l.steps[i];
  if (!step.prediction || revealed) return step.title.in(zh ? Lang::zh : Lang::en);
  char buf[96];
  std::snprintf(buf, sizeof buf, zh ? "第 %zu 步（共 %zu 步）：先预测" : "Step %zu of %zu: a prediction first", i + 1,
                l.steps.size());
  return buf;
}

}  // namespace

void LessonPanel::draw_frame(AppState& app, const Snapshot& snap) {
  const LessonView& v = snap.lesson;
  const Lang lang = app.lesson.zh ? Lang::zh : Lang::en;
  const bool zh = lang == Lang::zh;

  if (ImGui::RadioButton("English", !app.lesson.zh)) app.lesson.zh = false;
  ImGui::SameLine();
  if (ImGui::RadioButton("中文", app.lesson.zh)) app.lesson.zh = true;
  const lesson::Lesson* l = v.open_lesson();
  if (l) {
    ImGui::SameLine();
    if (ImGui::SmallButton(zh ? "课程列表" : "All lessons")) app.lesson.open_request = -1;
  }
  ImGui::Separator();
  if (!l) {
    draw_list(app, v, lang);
    return;
  }

  // Title, then the steps as numbered buttons: jump to any.
  colored_wrapped(colors::kAccuracy, l->title.in(lang));
  for (size_t i = 0; i < l->steps.size(); ++i) {
    if (i > 0) ImGui::SameLine();
    const bool current = static_cast<int>(i) == v.step;
    const lesson::StepOutcome* o = v.outcome(i);
    ImU32 color = current ? colors::kGpuBox : colors::kFree;
    if (o) color = o->passed ? colors::kLogicalBox : colors::kError;
    ImGui::PushStyleColor(ImGuiCol_Button, color);
    char label[24];  // any size_t in decimal
    std::snprintf(label, sizeof label, "%zu", i + 1);
    if (ImGui::Button(label) && !current) app.lesson.step_request = static_cast<int>(i);
    ImGui::PopStyleColor();
    // A step's title often states what happens: before its prediction is answered by a run,
    // the step shows its number only (here and as its heading below).
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", title_or_number(*l, i, o != nullptr, zh).c_str());
  }
  const lesson::Step* step = v.current_step();
  if (!step) return;

  // The text, scrolling, above the fixed bottom part (prediction, checks, navigation).
  const float bottom = ImGui::GetFrameHeightWithSpacing() * 2.0f + ImGui::GetTextLineHeightWithSpacing() * 7.0f;
  ImGui::BeginChild("lesson-text", ImVec2(0, -bottom), false);
  if (v.step == 0) draw_document(l->intro(lang));
  const lesson::StepOutcome* outcome = v.outcome(static_cast<size_t>(v.step));
  // Predict first: a step with a question keeps its text (which explains the answer) until it
  // has run, unless the learner asks for it.
  const bool hide_text = step->prediction && !outcome && shown_text_step != v.step;
  colored_wrapped(colors::kText, title_or_number(*l, static_cast<size_t>(v.step), !hide_text, zh));
  // The panel by its title ("Step flow"), not the lesson file's key ("step_flow").
  const std::optional<PanelId> panel = parse_panel(step->panel);
  colored_wrapped(colors::kTextDim, lesson::scenario_summary(*step, lang) + "   [" +
                                        (panel ? panel_display_name(*panel, zh) : step->panel) + "]");
  ImGui::Separator();

  if (hide_text) {
    colored_wrapped(colors::kWarning, zh ? "先回答下面的预测问题，再点“运行并检查”：讲解会在运行之后出现。"
                                         : "Answer the prediction below, then press Run and check: the "
                                           "explanation appears once the step has run.");
    if (ImGui::SmallButton(zh ? "直接显示讲解" : "Show the text anyway")) shown_text_step = v.step;
  } else {
    draw_document(step->text(lang));
  }

  if (outcome) {
    ImGui::Separator();
    for (const lesson::CheckResult& c : outcome->checks) {
      ImGui::PushStyleColor(ImGuiCol_Text, c.pass ? colors::kAllocated : colors::kError);
      ImGui::TextUnformatted(c.pass ? "PASS" : "FAIL");
      ImGui::PopStyleColor();
      ImGui::SameLine();
      wrapped(c.check->claim.in(lang));
      if (!c.pass || ImGui::IsItemHovered())
        colored_wrapped(colors::kTextDim, "  " + c.check->observable + " = " + c.actual +
                                              "  (" + c.detail(lang) + ")");
    }
  }
  if (!v.run_error.empty()) colored_wrapped(colors::kError, v.run_error);
  ImGui::EndChild();

  // The prediction: asked before the step runs, answered from what the runtime did.
  ImGui::Separator();
  const int lesson_index = v.lesson;
  if (answered_lesson != lesson_index) {
    answered_lesson = lesson_index;
    answered_step = -1;
    shown_text_step = -1;
    answer.clear();
  }
  if (step->prediction) {
    const lesson::Prediction& p = *step->prediction;
    wrapped(std::string(zh ? "预测：" : "Predict: ") + p.question.in(lang));
    if (!p.choices.empty()) {
      const ImGuiStyle& style = ImGui::GetStyle();
      float x = 0;  // where the next choice would start on this row
      for (size_t i = 0; i < p.choices.size(); ++i) {
        // Choices side by side while they fit ("cuda:0 = GPU 0, cuda:1 = GPU 2" needs a row).
        const float w = ImGui::GetFrameHeight() + style.ItemInnerSpacing.x + ImGui::CalcTextSize(p.choices[i].c_str()).x;
        if (i > 0 && x + style.ItemSpacing.x + w <= ImGui::GetContentRegionAvail().x) {
          ImGui::SameLine();
          x += style.ItemSpacing.x + w;
        } else {
          x = w;
        }
        if (ImGui::RadioButton(p.choices[i].c_str(), answer == p.choices[i] && answered_step == v.step)) {
          answer = p.choices[i];
          answered_step = v.step;
        }
      }
    } else {
      ImGui::SetNextItemWidth(std::min(220.0f, ImGui::GetContentRegionAvail().x));
      if (ImGui::InputText("##answer", &answer)) answered_step = v.step;
    }
    if (outcome && answered_step == v.step && !answer.empty()) {
      lesson::Missing missing;
      const std::optional<lesson::Value> real = lesson::lookup(p.observable, outcome->observables, {}, &missing);
      const bool right = real && lesson::answer_matches(p, *real, answer);
      const std::string actual = outcome->prediction ? outcome->prediction->shown(lang) : (real ? lesson::format_value(*real) : lesson::describe_missing(missing, lang));
      if (right)
        colored_wrapped(colors::kAllocated, std::string(zh ? "答对了：" : "Right: ") + actual);
      else if (real && !lesson::answer_is_judged(p, *real))  // an open question: compare for yourself
        colored_wrapped(colors::kText, std::string(zh ? "实际结果：" : "The runtime says: ") + actual);
      else
        colored_wrapped(colors::kWarning, std::string(zh ? "实际是：" : "Actually: ") + actual);
    } else if (outcome && outcome->prediction) {
      colored_wrapped(colors::kTextDim, std::string(zh ? "实际结果：" : "The runtime says: ") + outcome->prediction->shown(lang));
    }
  } else {
    ImGui::TextUnformatted("");
  }

  // Navigation and the run.
  ImGui::BeginDisabled(v.step == 0);
  if (ImGui::Button(zh ? "< 上一步" : "< Back")) app.lesson.step_request = v.step - 1;
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(v.running);
  if (ImGui::Button(v.running ? (zh ? "运行中..." : "Running...") : (zh ? "运行并检查" : "Run and check")))
    app.lesson.run_request = true;
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(v.step + 1 >= static_cast<int>(l->steps.size()));
  if (ImGui::Button(zh ? "下一步 >" : "Next >")) app.lesson.step_request = v.step + 1;
  ImGui::EndDisabled();
  if (outcome) {
    ImGui::SameLine();
    size_t passed = 0;
    for (const lesson::CheckResult& c : outcome->checks) passed += c.pass ? 1 : 0;
    char line[64];
    std::snprintf(line, sizeof line, "%zu/%zu %s", passed, outcome->checks.size(), zh ? "通过" : "pass");
    colored_wrapped(outcome->passed ? colors::kAllocated : colors::kError, line);
  }
}

}  // namespace furnace::viz
