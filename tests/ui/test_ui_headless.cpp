// The panels with no window: an ImGui context with a hand-built font atlas (ImGui 1.86 has no null
// backend), 1280x800 at 1/60 s, draw_frame on a fake DataParallel run; every panel must produce
// draw data, alone and together, and the step flow must move through its stages.
#include <gtest/gtest.h>
#include <imgui.h>

#include "fake_run.h"
#include "panels.h"
#include "theme.h"
#include "trace_file.h"

namespace furnace::viz {
namespace {

class HeadlessUi : public ::testing::Test {
 protected:
  void SetUp() override {
    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    apply_theme(ImGui::GetStyle());
    fonts_ = load_fonts(io, 15.0f, /*cjk=*/with_cjk_);
    unsigned char* pixels = nullptr;
    int w = 0, h = 0;
    io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);  // builds the atlas; no texture upload needed
    io.Fonts->SetTexID(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(1)));
    io.DisplaySize = ImVec2(1280, 800);
    io.DeltaTime = 1.0f / 60.0f;
  }
  void TearDown() override { ImGui::DestroyContext(); }

  // Runs `frames` frames; returns the draw data's command-list count of the last one.
  int run_frames(Ui& ui, AppState& app, const Snapshot& snap, int frames, int* vertices = nullptr) {
    int lists = 0;
    for (int i = 0; i < frames; ++i) {
      ImGui::NewFrame();
      ui.draw_frame(app, snap);
      ImGui::Render();
      const ImDrawData* dd = ImGui::GetDrawData();
      lists = dd->CmdListsCount;
      if (vertices) *vertices = dd->TotalVtxCount;
    }
    return lists;
  }

  bool with_cjk_ = false;
  FontReport fonts_;
};

TEST_F(HeadlessUi, EveryPanelAloneProducesDrawData) {
  SnapshotBuilder b = testing::fake_dp_run();
  LessonDriver lessons;  // the Lesson panel lists the lessons of the source tree
  lessons.load();
  ASSERT_FALSE(lessons.view().lessons->empty());
  b.snapshot().lesson = lessons.view();
  for (int i = 0; i < kPanelCount; ++i) {
    const auto id = static_cast<PanelId>(i);
    Ui ui;
    AppState app;
    app.solo = id;
    int vertices = 0;
    EXPECT_GT(run_frames(ui, app, b.snapshot(), 5, &vertices), 0) << panel_name(id);
    EXPECT_GT(vertices, 400) << panel_name(id) << " drew almost nothing";
  }
}

TEST_F(HeadlessUi, TheWholeLayoutDrawsEveryWindow) {
  SnapshotBuilder b = testing::fake_dp_run();
  Ui ui;
  AppState app;
  EXPECT_GE(run_frames(ui, app, b.snapshot(), 5), kPanelCount);  // six windows plus the menu bar
}

TEST_F(HeadlessUi, TheLessonPanelDrawsAStepAndOutlinesItsPanel) {
  SnapshotBuilder b = testing::fake_dp_run();
  LessonDriver lessons;
  lessons.load();
  const int index = lessons.find("01-single-card");
  ASSERT_GE(index, 0);
  lessons.open(index);
  b.snapshot().lesson = lessons.view();
  Ui ui;
  AppState app;
  app.is_open(PanelId::lesson) = true;
  int with_lesson = 0;
  EXPECT_GE(run_frames(ui, app, b.snapshot(), 5, &with_lesson), kPanelCount);  // seven windows
  lessons.open(-1);
  b.snapshot().lesson = lessons.view();
  int list_only = 0;
  run_frames(ui, app, b.snapshot(), 3, &list_only);
  EXPECT_NE(with_lesson, list_only);  // the step's text and outline, not the list
  for (bool zh : {false, true}) {  // both languages draw
    app.lesson.zh = zh;
    app.solo = PanelId::lesson;
    int vertices = 0;
    EXPECT_GT(run_frames(ui, app, b.snapshot(), 2, &vertices), 0);
    EXPECT_GT(vertices, 400);
  }
}

TEST_F(HeadlessUi, AnEmptySnapshotDrawsWithoutEvents) {
  Snapshot empty;
  Ui ui;
  AppState app;
  EXPECT_GT(run_frames(ui, app, empty, 5), 0);
  for (int i = 0; i < kPanelCount; ++i) {
    app.solo = static_cast<PanelId>(i);
    EXPECT_GT(run_frames(ui, app, empty, 2), 0) << panel_name(static_cast<PanelId>(i));
  }
}

TEST_F(HeadlessUi, TheStepFlowPlaysEveryStageOfTheStepFromTheTrace) {
  SnapshotBuilder b = testing::fake_dp_run();
  Ui ui;
  AppState app;
  app.solo = PanelId::step_flow;
  run_frames(ui, app, b.snapshot(), 1);
  ASSERT_EQ(ui.step_flow.stages.size(), std::size(testing::kDpPhases));
  for (size_t i = 0; i < ui.step_flow.stages.size(); ++i)
    EXPECT_STREQ(ui.step_flow.stages[i].name, testing::kDpPhases[i]);
  std::vector<bool> seen(ui.step_flow.stages.size(), false);
  for (int f = 0; f < 60 * 10; ++f) {  // ten seconds at 60 fps: one pass through every stage
    run_frames(ui, app, b.snapshot(), 1);
    seen[static_cast<size_t>(ui.step_flow.player.stage)] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "stage " << testing::kDpPhases[i];
}

TEST_F(HeadlessUi, TheTimelineDrawsATraceFile) {
  SnapshotBuilder b = testing::fake_dp_run();
  b.snapshot().file_timeline = parse_chrome_trace(
      R"({"traceEvents":[{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"cuda:0 H100"}},
          {"ph":"X","name":"gemm","cat":"kernel","pid":0,"tid":7,"ts":10,"dur":5},
          {"ph":"X","name":"h2d","cat":"copy","pid":0,"tid":8,"ts":12,"dur":3}]})",
      "real.json");
  Ui ui;
  AppState app;
  app.solo = PanelId::timeline;
  int vertices = 0;
  EXPECT_GT(run_frames(ui, app, b.snapshot(), 3, &vertices), 0);
  EXPECT_EQ(ui.timeline.last_data, &b.snapshot().file_timeline);
}

TEST_F(HeadlessUi, LongLiveRunsStayBoundedAndCheap) {
  SnapshotBuilder b = testing::fake_dp_run(3000);  // 3000 steps: decimated curves, kept steps
  const Snapshot& s = b.snapshot();
  EXPECT_LT(static_cast<int>(s.training.loss.size()), TrainingSeries::kMaxPoints);
  EXPECT_GT(s.training.stride, 1);
  EXPECT_LE(s.steps.size(), SnapshotBuilder::kStepsKept);
  Ui ui;
  AppState app;
  int vertices = 0;
  run_frames(ui, app, s, 3, &vertices);
  EXPECT_LT(vertices, 400000) << "the timeline should draw only what is visible";
}

class HeadlessUiChinese : public HeadlessUi {
 protected:
  HeadlessUiChinese() { with_cjk_ = true; }
};

TEST_F(HeadlessUiChinese, TheTitlesGetChineseGlyphsWhenAFontIsInstalled) {
  if (fonts_.cjk.empty()) GTEST_SKIP() << "no CJK font installed (apt-get install fonts-wqy-microhei)";
  const ImFont* font = ImGui::GetIO().Fonts->Fonts[0];
  for (ImWchar c : {0x8BBE /* 设 */, 0x5907 /* 备 */, 0x70BC /* 炼 */, 0x4E39 /* 丹 */})
    EXPECT_NE(font->FindGlyphNoFallback(c), nullptr) << "U+" << std::hex << c;
  SnapshotBuilder b = testing::fake_dp_run(5);
  Ui ui;
  AppState app;
  EXPECT_GT(run_frames(ui, app, b.snapshot(), 2), 0);
}

}  // namespace
}  // namespace furnace::viz
