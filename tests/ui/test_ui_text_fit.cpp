// No text overflows its box at the default window size (1280x800): every panel is drawn headless
// with a TextOverflowLog installed; a label that CalcTextSize says is wider than its room (a GPU
// name in its box, a caption beside a bar) or a window whose items reach past its right edge fails
// the test with the window and the text. Layouts: the live DataParallel run alone, each panel
// alone, and lesson steps (before and after Run and check, in each parallel mode) in English and
// Chinese.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>  // defines: ImTextCharFromUtf8

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "fake_run.h"
#include "lang.h"
#include "panels.h"
#include "runner.h"  // defines: describe_scenario
#include "text_fit.h"
#include "theme.h"

namespace furnace::viz {
namespace {

class TextFit : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    apply_theme(ImGui::GetStyle());
    fonts_ = load_fonts(io, 15.0f, /*cjk=*/GetParam());
    if (GetParam() && fonts_.cjk.empty()) GTEST_SKIP() << "no CJK font installed (apt-get install fonts-wqy-microhei)";
    unsigned char* pixels = nullptr;
    int w = 0, h = 0;
    io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
    io.Fonts->SetTexID(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(1)));
    io.DisplaySize = ImVec2(1280, 800);
    io.DeltaTime = 1.0f / 60.0f;
    app_.lesson.zh = GetParam();
  }
  void TearDown() override { ImGui::DestroyContext(); }

  // Draws a few frames (windows take their layout on the first) and returns what overflowed in
  // the last one, one line each.
  // `must_fit`: the windows whose items must all be in view, none below the bottom edge.
  std::string overflows(const Snapshot& snap, int frames = 4,
                        const std::vector<std::string>& must_fit = {"flow", "controls"}) {
    TextOverflowLog log;
    for (int i = 0; i < frames; ++i) {
      log.entries.clear();
      set_overflow_log(&log);
      ImGui::NewFrame();
      ui_.draw_frame(app_, snap);
      ImGui::Render();
      note_window_overflows(log);
      note_window_clipping(log, must_fit);
      set_overflow_log(nullptr);
    }
    std::ostringstream out;
    for (const TextOverflow& o : log.entries)
      out << "[" << o.window << "] \"" << o.text << "\" needs " << o.needed << " px, has " << o.room << "\n";
    return out.str();
  }

  FontReport fonts_;
  Ui ui_;
  AppState app_;
};

TEST_P(TextFit, TheDefaultLayoutOfALiveRun) {
  SnapshotBuilder b = testing::fake_dp_run();
  EXPECT_EQ(overflows(b.snapshot()), "");
}

TEST_P(TextFit, AnEmptyProcessBeforeItsFirstStep) {
  SnapshotBuilder b;
  b.reset(load_topology("workstation-4x3090"), "sim");
  b.snapshot().run.state = RunStatus::State::loading;
  EXPECT_EQ(overflows(b.snapshot()), "");
}

TEST_P(TextFit, EachPanelAlone) {
  SnapshotBuilder b = testing::fake_dp_run();
  for (int i = 0; i < kPanelCount; ++i) {
    app_.solo = static_cast<PanelId>(i);
    EXPECT_EQ(overflows(b.snapshot()), "") << panel_name(*app_.solo);
  }
}

// A DistributedDataParallel run of 8 ranks: the Step flow at each of its stages (the buckets
// filling, each bucket's ring, the legend and the figures), every panel, the Controls on ddp.
TEST_P(TextFit, TheDdpLayoutAtEveryStage) {
  SnapshotBuilder b = testing::fake_ddp_run();
  app_.controls.parallel = "ddp";
  EXPECT_EQ(overflows(b.snapshot()), "");
  const size_t stages = ui_.step_flow.stages.size();
  ASSERT_EQ(stages, 7u);  // h2d, forward, loss, backward, all_reduce x 2, optimizer
  for (size_t i = 0; i < stages; ++i) {
    ui_.step_flow.player.jump(static_cast<int>(i));
    ui_.step_flow.player.playing = false;
    ui_.step_flow.player.t = StepFlowPlayer::kTransition;
    EXPECT_EQ(overflows(b.snapshot()), "") << "stage " << i << " " << ui_.step_flow.stages[i].name;
    EXPECT_EQ(ui_.step_flow.player.stage, static_cast<int>(i));
  }
  for (int i = 0; i < kPanelCount; ++i) {
    app_.solo = static_cast<PanelId>(i);
    EXPECT_EQ(overflows(b.snapshot()), "") << panel_name(*app_.solo);
  }
}

// Lesson steps beside the live panels, before the step ran and after its checks. Beside a lesson
// the Step flow, every knob of the Controls and the Devices' notes are in view without scrolling,
// in each parallel mode (the Controls' knobs and the run's description differ).
TEST_P(TextFit, LessonSteps) {
  LessonDriver lessons;
  lessons.load();
  const std::pair<const char*, int> steps[] = {{"01-single-card", 0}, {"03-device-mapping", 1},
                                               {"05-memory", 2}, {"05-memory", 4}, {"08-select-gpu", 0}, {"11-mixed-precision", 1}, {"13-ddp", 1}};
  const std::vector<std::string> must_fit = {"flow", "controls", "devices"};
  auto each_mode = [&](SnapshotBuilder& b, const std::string& when) {
    for (const char* mode : {"none", "dp", "ddp"}) {
      app_.controls.parallel = mode;
      Scenario sc = app_.controls.scenario;
      sc.topology = "workstation-4x3090";  // the longest machine name, as the lessons' runs
      sc.parallel = mode;
      b.snapshot().run.scenario = describe_scenario(sc, false);
      b.snapshot().run.scenario_zh = describe_scenario(sc, true);
      EXPECT_EQ(overflows(b.snapshot(), 4, must_fit), "") << when << ", parallel " << mode;
    }
  };
  for (const auto& [id, step] : steps) {
    const int index = lessons.find(id);
    ASSERT_GE(index, 0) << id;
    lessons.open(index);
    lessons.go_to(step);
    SnapshotBuilder b = testing::fake_dp_run();
    app_.is_open(PanelId::lesson) = true;
    b.snapshot().lesson = lessons.view();
    each_mode(b, std::string(id) + " step " + std::to_string(step + 1) + " before running");
    lessons.run_current();
    lessons.wait();
    lessons.poll();
    b.snapshot().lesson = lessons.view();
    each_mode(b, std::string(id) + " step " + std::to_string(step + 1) + " after running");
  }
}

// Beside a lesson the Devices' notes fit at their longest: a CUDA_VISIBLE_DEVICES that stopped at
// an entry (the entries in two rows, then the reason), as set and edited since CUDA initialised
// (the warning and its restart button).
TEST_P(TextFit, DevicesNotesBesideALesson) {
  SnapshotBuilder b = testing::fake_dp_run();
  app_.is_open(PanelId::lesson) = true;
  const Environment env{{kCudaVisibleDevices, "0,2,-1,1"}};
  b.snapshot().visibility = resolve_visibility(b.snapshot().topology.gpus, env);
  ASSERT_NE(b.snapshot().visibility.stop, VisibilityStop::none);
  app_.env.visible_set = true;
  app_.env.visible = "0,2,-1,1";
  EXPECT_EQ(overflows(b.snapshot(), 4, {"devices"}), "") << "as set";
  app_.env.visible = "1,0";
  EXPECT_EQ(overflows(b.snapshot(), 4, {"devices"}), "") << "edited";
}

// Every Chinese character of the panels' own labels is in the font atlas (ui_glyphs): ImGui's
// common Chinese range lacks some, which then draw as nothing ("ms/帧" showed as "ms/").
TEST(UiGlyphs, CoverEveryChineseCharacterOfTheLabels) {
  std::u32string have;
  for (const char* p = ui_glyphs(); *p;) {
    unsigned int c = 0;
    p += ImTextCharFromUtf8(&c, p, nullptr);
    have += static_cast<char32_t>(c);
  }
  std::vector<std::filesystem::path> sources{FURNACE_UI_RUNTIME_TEXT, FURNACE_UI_LESSON_TEXT, FURNACE_UI_LESSON_SETUP_TEXT};
  for (const auto& entry : std::filesystem::directory_iterator(FURNACE_UI_SOURCE_DIR)) sources.push_back(entry.path());
  for (const std::filesystem::path& source : sources) {
    std::ifstream in(source);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* p = text.c_str(); *p;) {
      unsigned int c = 0;
      p += ImTextCharFromUtf8(&c, p, nullptr);
      if (c >= 0x2E80 && have.find(static_cast<char32_t>(c)) == std::u32string::npos)
        ADD_FAILURE() << source.filename() << " uses U+" << std::hex << c << ", missing from ui_glyphs (lang.cpp)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Languages, TextFit, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Chinese" : "English"; });

}  // namespace
}  // namespace furnace::viz
