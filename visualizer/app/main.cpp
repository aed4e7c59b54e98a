// furnace-viz: the GLFW + OpenGL3 glue around the UI library (visualizer/ui): options, the window,
// the frame loop in Dear ImGui's order (poll, backend new-frame, NewFrame, UI, Render, draw,
// swap), screenshots (--screenshot: the back buffer read before the swap, written as PNG) and
// frame statistics (--frame-stats). The only file that includes GLFW or GL. Not here: panels,
// training, the snapshot (all in ui/).
#include <malloc.h>  // defines: mallopt

#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <GLFW/glfw3.h>  // defines: glfw*, and includes GL/gl.h (glReadPixels)
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include "cli_arguments.h"  // defines: parse_arguments (runtime/cli)
#include "controller.h"   // defines: Controller, parse_hidden
#include "frame_stats.h"  // defines: FrameStats
#include "png_file.h"     // defines: write_png_file
#include "furnace/error.h"       // defines: FURNACE_CHECK, printable
#include "furnace/process.h"
#include "furnace/stop_signals.h"  // defines: install_stop_signals, stop_signal, ignore_file_size_signal
#include "furnace/topology.h"    // defines: load_topology
#include "furnace/visibility.h"  // defines: check_visible_devices_flag, parse_device_order
#include "panels.h"       // defines: Ui
#include "step_flow.h"    // defines: stage_names
#include "theme.h"        // defines: apply_theme, load_fonts
#include "lesson_driver.h"  // defines: LessonDriver
#include "trace_file.h"   // defines: load_chrome_trace
#include "window_size.h"  // defines: parse_window_size

namespace {

using furnace::viz::AppState;
using Clock = std::chrono::steady_clock;

struct Options {
  furnace::Scenario scenario;
  std::string hidden = "512,512";
  std::string device_ids;
  int output_device = -1;
  std::optional<std::string> visible, order;
  std::string screenshot;
  int frames = 0;  // 0: until the window closes
  std::string panel;
  bool frame_stats = false;
  std::string size = "1280x800";
  double fps = 60;
  float step_delay_ms = 100;
  int wait_steps = 0;
  std::string trace_file;
  std::string lesson;       // --lesson ID: open the Lesson panel on that lesson
  int lesson_step = 1;      // --lesson-step N (1-based)
  bool lesson_step_given = false;
  std::string lang = "en";  // --lang en|zh
  bool lesson_run = false;  // --lesson-run: run the step's checks (a screenshot waits for them)
  bool paused = false;
  bool no_cjk = false;
  std::string stage;
  std::string training_priority = "idle";
};

// GLFW reports errors through a plain function pointer, so they meet here (the only mutable
// globals of the app). Until the window is up the last one is kept and folded into the single
// line that says why no window opened; after that each is printed as it comes.
std::string glfw_last_error;
bool glfw_errors_to_stderr = false;

void on_glfw_error(int code, const char* text) {
  glfw_last_error = std::string(text ? text : "") + " (error " + std::to_string(code) + ")";
  if (glfw_errors_to_stderr) std::fprintf(stderr, "furnace-viz: GLFW error %d: %s\n", code, text);
}

std::string glfw_error_text() { return glfw_last_error.empty() ? "no error reported" : furnace::printable(glfw_last_error); }

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The back buffer as RGB, top row first. Call after rendering, before the swap.
std::vector<unsigned char> read_back_buffer(int w, int h) {
  const size_t row = static_cast<size_t>(w) * 3;
  std::vector<unsigned char> gl(row * static_cast<size_t>(h)), rgb(gl.size());
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, gl.data());
  for (int y = 0; y < h; ++y)  // GL: bottom row first
    std::memcpy(rgb.data() + static_cast<size_t>(y) * row, gl.data() + static_cast<size_t>(h - 1 - y) * row, row);
  return rgb;
}

// A 64-bit hash of everything that decides the picture: vertices, indices, commands, size.
uint64_t hash_draw_data(const ImDrawData* dd, int w, int h) {
  uint64_t x = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(w) << 32 | static_cast<uint32_t>(h));
  auto mix = [&x](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t v = 0;
    for (; bytes >= 8; bytes -= 8, p += 8) {
      std::memcpy(&v, p, 8);
      x = (x ^ v) * 0x100000001B3ull;
      x ^= x >> 29;
    }
    v = 0;
    std::memcpy(&v, p, bytes);
    x = (x ^ v ^ bytes) * 0x100000001B3ull;
  };
  for (int i = 0; i < dd->CmdListsCount; ++i) {
    const ImDrawList* cl = dd->CmdLists[i];
    mix(cl->VtxBuffer.Data, static_cast<size_t>(cl->VtxBuffer.Size) * sizeof(ImDrawVert));
    mix(cl->IdxBuffer.Data, static_cast<size_t>(cl->IdxBuffer.Size) * sizeof(ImDrawIdx));
    for (const ImDrawCmd& c : cl->CmdBuffer) {
      const float f[6] = {c.ClipRect.x, c.ClipRect.y, c.ClipRect.z, c.ClipRect.w,
                          static_cast<float>(c.ElemCount), static_cast<float>(c.IdxOffset)};
      mix(f, sizeof f);
    }
  }
  return x;
}

int run(const Options& o) {
  // The GL driver allocates and frees megabyte-sized buffers every frame (vertex uploads, the
  // software renderer's present): keep them in the heap instead of mmap/munmap + page faults.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  const std::optional<furnace::viz::WindowSize> size = furnace::viz::parse_window_size(o.size);
  if (!size) {
    std::fprintf(stderr, "furnace-viz: --size must be WIDTHxHEIGHT, from 320x240 to 16384x16384 (got '%s')\n",
                 furnace::printable(o.size).c_str());
    return 2;
  }
  const int width = size->width, height = size->height;
  std::optional<furnace::viz::PanelId> solo;
  if (!o.panel.empty()) {
    solo = furnace::viz::parse_panel(o.panel);
    if (!solo) {
      std::fprintf(stderr, "furnace-viz: --panel must be one of devices, flow, memory, training, "
                           "timeline, controls, lesson (got '%s')\n", furnace::printable(o.panel).c_str());
      return 2;
    }
  }

  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr, "furnace-viz: cannot open a window (DISPLAY is %s; GLFW: %s); without a display, "
                         "render to a PNG: xvfb-run -a furnace-viz --screenshot viz.png --frames 240\n",
                 std::getenv("DISPLAY") ? "set, but unreachable" : "unset", glfw_error_text().c_str());
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
  glfwWindowHint(GLFW_DEPTH_BITS, 0);  // ImGui draws 2D only: no depth or stencil buffer to keep
  glfwWindowHint(GLFW_STENCIL_BITS, 0);
  GLFWwindow* window = glfwCreateWindow(width, height, "Furnace 炼丹炉 - furnace-viz", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "furnace-viz: cannot create an OpenGL 3.3 window (GLFW: %s)\n", glfw_error_text().c_str());
    glfwTerminate();
    return 1;
  }
  glfw_errors_to_stderr = true;
  glfwMakeContextCurrent(window);
  glfwSwapInterval(o.fps > 0 ? 0 : 1);  // our own pacing (vsync does not pace under Xvfb)

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout comes from the code: screenshots are reproducible
  furnace::viz::apply_theme(ImGui::GetStyle());
  const furnace::viz::FontReport fonts = furnace::viz::load_fonts(io, 15.0f, !o.no_cjk,
                                                                   o.no_cjk ? "" : furnace::viz::LessonDriver::all_text());
  // One line when the choice fell back: which fonts, and why the others were passed over.
  if (fonts.fell_back()) std::fprintf(stderr, "furnace-viz: %s\n", fonts.summary().c_str());
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  AppState app;
  app.solo = solo;
  app.controls.scenario = o.scenario;
  app.controls.hidden = o.hidden;
  app.controls.parallel = o.scenario.parallel;
  app.controls.device_ids = o.device_ids;
  app.controls.output_device = o.output_device;
  app.controls.step_delay_ms = o.step_delay_ms;
  const furnace::Environment os_env = furnace::cuda_environment_from_os();
  if (auto it = os_env.find(furnace::kCudaVisibleDevices); it != os_env.end()) {
    app.env.visible_set = true;
    app.env.visible = it->second;
  }
  if (auto it = os_env.find(furnace::kCudaDeviceOrder); it != os_env.end()) app.env.order = it->second;
  if (o.visible) {
    app.env.visible_set = true;
    app.env.visible = *o.visible;
  }
  if (o.order) app.env.order = *o.order;
  if (!o.trace_file.empty()) app.open_trace = o.trace_file;
  app.lesson.zh = o.lang == "zh";
  glfwSetWindowUserPointer(window, &app);
  glfwSetDropCallback(window, [](GLFWwindow* w, int count, const char** paths) {  // a dropped trace file
    if (count > 0) static_cast<AppState*>(glfwGetWindowUserPointer(w))->open_trace = paths[0];
  });

  int rc = 0;
  {
    using Priority = furnace::viz::Runner::Priority;
    const Priority priority = o.training_priority == "normal" ? Priority::normal
                              : o.training_priority == "low" ? Priority::low : Priority::idle;
    // With --lesson the lesson step sets up the scenario (and starts it, unless it is about a
    // process before its first device use).
    furnace::viz::Controller controller(app, !o.paused && o.lesson.empty(), priority);
    if (!o.lesson.empty()) {  // checked in validate(): the lesson exists
      app.lesson.open_request = controller.lessons().find(o.lesson);
      app.lesson.step_request = o.lesson_step - 1;
      app.lesson.run_request = o.lesson_run;
    }
    furnace::viz::Ui ui;
    bool stage_set = false;
    furnace::viz::FrameStats work_ms, interval_ms, ui_ms, gl_ms;
    const auto t_start = Clock::now();
    auto last_frame = t_start;
    const double period = o.fps > 0 ? 1.0 / o.fps : 0.0;
    constexpr int kWarmup = 30;  // font upload, first layout, dataset loading
    int frame = 0, counted = 0, last_vertices = 0, last_indices = 0, drawn = 0, skipped = 0;
    uint64_t last_hash = 0;
    auto last_draw = t_start, shown_at = t_start;
    double shown_ms = 0;
    bool waiting = o.wait_steps > 0;
    while (!glfwWindowShouldClose(window)) {
      const auto t0 = Clock::now();
      glfwPollEvents();
      if (furnace::stop_signal() != 0) {
        glfwSetWindowShouldClose(window, GLFW_TRUE);
        rc = 128 + furnace::stop_signal();
        break;
      }
      ImGui_ImplOpenGL3_NewFrame();
      if (frame == 0) {  // the font texture exists now: glyphs are pixel-exact, so sample NEAREST
                         // (cheaper than LINEAR in a software renderer, same pixels on screen)
        glBindTexture(GL_TEXTURE_2D, static_cast<GLuint>(reinterpret_cast<intptr_t>(io.Fonts->TexID)));
        glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
        glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
      }
      ImGui_ImplGlfw_NewFrame();
      if (!o.screenshot.empty()) io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);  // no hover tooltips in PNGs
      if (!waiting && !o.stage.empty() && ui.step_flow.hold_stage.empty() && !stage_set) {
        ui.step_flow.hold_stage = o.stage;  // once training has gone far enough (--wait-steps)
        stage_set = true;
      }
      const auto t_ui = Clock::now();
      ImGui::NewFrame();
      controller.update(app, seconds_since(t_start));
      ui.draw_frame(app, controller.snapshot());
      ImGui::Render();
      const auto t_gl = Clock::now();
      int fb_w = 0, fb_h = 0;
      glfwGetFramebufferSize(window, &fb_w, &fb_h);
      // A frame whose draw data equals the previous one's is not drawn again: the window keeps
      // showing it (redrawn at least twice a second, for expose events). With a software renderer
      // that leaves the CPU to training whenever the picture holds still.
      const uint64_t hash = hash_draw_data(ImGui::GetDrawData(), fb_w, fb_h);
      const bool redraw = hash != last_hash || seconds_since(last_draw) > 0.5 || frame == 0;
      if (redraw) {
        glViewport(0, 0, fb_w, fb_h);
        const ImVec4 bg = ImGui::ColorConvertU32ToFloat4(furnace::viz::colors::kPanel);
        glClearColor(bg.x, bg.y, bg.z, 1.0f);
        glClear(GL_COLOR_BUFFER_BIT);
        ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
        last_hash = hash;
        last_draw = Clock::now();
      }
      last_vertices = ImGui::GetDrawData()->TotalVtxCount;
      last_indices = ImGui::GetDrawData()->TotalIdxCount;

      if (waiting) {  // --wait-steps: frames count once training has gone that far
        const auto& run = controller.snapshot().run;
        waiting = controller.snapshot().training.global_step < o.wait_steps && seconds_since(t_start) < 120 &&
                  run.state != furnace::viz::RunStatus::State::failed;
      }
      // --lesson-run: frames count once the checks are in and the step's live run (if it started
      // one) has got past loading: training, or failed as the step may intend.
      if (!waiting && o.lesson_run &&
          (app.lesson.run_request || controller.lessons().view().running ||
           controller.snapshot().run.state == furnace::viz::RunStatus::State::loading))
        waiting = seconds_since(t_start) < 120;
      const bool last = !waiting && o.frames > 0 && counted + 1 >= o.frames;
      if (last && !o.screenshot.empty()) {
        if (!redraw) ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());  // the back buffer is stale
        glFinish();
        try {
          furnace::viz::write_png_file(o.screenshot, read_back_buffer(fb_w, fb_h), fb_w, fb_h);
          std::printf("screenshot: %s (%dx%d, frame %d)\n", o.screenshot.c_str(), fb_w, fb_h, frame + 1);
        } catch (const furnace::Error& e) {
          std::fprintf(stderr, "furnace-viz: %s\n", e.what());
          rc = 1;
        }
      }
      if (redraw) glfwSwapBuffers(window);
      const auto t1 = Clock::now();
      const double work = std::chrono::duration<double, std::milli>(t1 - t0).count();
      shown_ms = std::max(shown_ms, work);
      if (seconds_since(shown_at) > 0.5) {  // the status line: the slowest frame of the last half second
        app.frame_ms = static_cast<float>(shown_ms);
        shown_ms = 0;
        shown_at = Clock::now();
      }
      if (!waiting && frame >= kWarmup) {
        ++(redraw ? drawn : skipped);
        work_ms.add(work);
        ui_ms.add(std::chrono::duration<double, std::milli>(t_gl - t_ui).count());
        gl_ms.add(std::chrono::duration<double, std::milli>(t1 - t_gl).count());
        interval_ms.add(std::chrono::duration<double, std::milli>(t0 - last_frame).count());
      }
      last_frame = t0;
      ++frame;
      if (!waiting) ++counted;
      if (last) break;
      if (period > 0) std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period)));
    }
    if (o.frame_stats) {
      const auto& s = controller.snapshot();
      std::printf("frame-stats: %zu frames after %d warm-up, %zu GPUs, step %lld, %s\n"
                  "  frame time (poll to swap)  p50 %.2f ms  p99 %.2f ms  max %.2f ms\n"
                  "  frame interval             p50 %.2f ms  p99 %.2f ms  (target %.1f ms)\n"
                  "  of which UI (NewFrame..Render) p50 %.2f ms  p99 %.2f ms; GL draw + swap p50 %.2f ms  p99 %.2f ms\n"
                  "  last frame: %d vertices, %d triangles; %d frames drawn, %d unchanged (not redrawn)\n",
                  work_ms.count(), kWarmup, s.devices.size(), static_cast<long long>(s.training.global_step),
                  furnace::viz::run_state_name(s.run.state), work_ms.percentile(50), work_ms.percentile(99),
                  work_ms.max(), interval_ms.percentile(50), interval_ms.percentile(99),
                  period > 0 ? 1000 * period : 0.0, ui_ms.percentile(50), ui_ms.percentile(99),
                  gl_ms.percentile(50), gl_ms.percentile(99), last_vertices, last_indices / 3, drawn, skipped);
    }
    const bool run_failed = controller.snapshot().run.state == furnace::viz::RunStatus::State::failed;
    const bool signalled = furnace::stop_signal() != 0;  // closed by a signal: only that is reported
    if (signalled) {
    } else if (run_failed && o.lesson.empty()) {
      std::fprintf(stderr, "furnace-viz: the run failed: %s\n", controller.snapshot().run.message.c_str());
      rc = 1;
    } else if (run_failed) {
      // A lesson step's scenario may fail on purpose (an invalid device id, a GPU that is not
      // visible): the live run's error is then what the step shows, and the step's checks judge it.
      std::printf("live run stopped (the lesson step's scenario): %s\n", controller.snapshot().run.message.c_str());
    }
    if (o.lesson_run && !signalled) {  // the exit status says whether the step's checks passed
      const furnace::viz::LessonView& lv = controller.lessons().view();
      const furnace::lesson::StepOutcome* outcome = lv.outcome(static_cast<size_t>(lv.step));
      if (!lv.run_error.empty()) {
        std::fprintf(stderr, "furnace-viz: the lesson step could not run: %s\n", lv.run_error.c_str());
        rc = 1;
      } else if (!outcome) {
        std::fprintf(stderr, "furnace-viz: the lesson step's checks did not finish in time\n");
        rc = 1;
      } else if (!outcome->passed) {
        std::fprintf(stderr, "furnace-viz: the lesson step's checks failed\n");
        rc = 1;
      }
    }
  }

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  if (const int sig = furnace::stop_signal())
    std::fprintf(stderr, "furnace-viz: closed by %s\n", furnace::stop_signal_name(sig));
  return rc;
}

// What can be checked before a window opens, with `furnace train`'s one-line messages: a bad
// value ends the program here instead of showing up later in a panel.
void check_options(const Options& o) {
  const furnace::Scenario& s = o.scenario;
  (void)furnace::load_topology(s.topology);
  FURNACE_CHECK(s.backend == "sim" || s.backend == "cuda")
      << "unknown backend '" << furnace::printable(s.backend) << "' (choose sim or cuda)";
  FURNACE_CHECK(s.data_dir.empty() || std::filesystem::is_directory(s.data_dir))
      << furnace::printable(s.data_dir) << ": dataset directory does not exist";
  FURNACE_CHECK(furnace::parse_parallel_mode(s.parallel) == furnace::ParallelMode::ddp || s.nproc == -1)
      << "--nproc needs --parallel ddp";
  FURNACE_CHECK(furnace::parse_parallel_mode(s.parallel) == furnace::ParallelMode::dp || (o.device_ids.empty() && o.output_device < 0))
      << (o.device_ids.empty() ? "--output-device" : "--device-ids") << " needs --parallel dp";
  if (o.visible) furnace::check_visible_devices_flag(*o.visible);
  if (o.order) {
    try {
      (void)furnace::parse_device_order(*o.order);
    } catch (const furnace::Error& e) {
      FURNACE_FAIL() << "--order: " << e.what();
    }
  }
  FURNACE_CHECK(o.frames >= 0) << "--frames must be 0 (until closed) or more (got " << o.frames << ")";
  FURNACE_CHECK(o.wait_steps >= 0) << "--wait-steps must be 0 or more (got " << o.wait_steps << ")";
  FURNACE_CHECK(std::isfinite(o.fps) && o.fps >= 0) << "--fps must be 0 (vsync) or more (got " << o.fps << ")";
  FURNACE_CHECK(std::isfinite(o.step_delay_ms) && o.step_delay_ms >= 0 && o.step_delay_ms <= 60000)
      << "--step-delay-ms must be in [0, 60000] (got " << o.step_delay_ms << ")";
  if (!o.trace_file.empty()) (void)furnace::viz::load_chrome_trace(o.trace_file);
  if (!o.screenshot.empty()) {
    const std::filesystem::path folder = std::filesystem::absolute(o.screenshot).parent_path();
    FURNACE_CHECK(std::filesystem::is_directory(folder))
        << "--screenshot: the folder '" << furnace::printable(folder.string()) << "' does not exist";
  }
  (void)furnace::lesson::parse_lang(o.lang);
  FURNACE_CHECK(!o.lesson.empty() || (!o.lesson_step_given && !o.lesson_run))
      << (o.lesson_run ? "--lesson-run" : "--lesson-step") << " needs --lesson ID";
  if (!o.lesson.empty()) {
    furnace::viz::LessonDriver lessons;
    lessons.load();
    const int index = lessons.find(o.lesson);
    // No lesson loaded at all: the folder's or the file's own message says why.
    const furnace::viz::LessonView& view = lessons.view();
    FURNACE_CHECK(index >= 0 || view.lessons->size() > 0 || view.load_errors.empty())
        << "--lesson: " << view.load_errors.front();
    FURNACE_CHECK(index >= 0) << "--lesson: no lesson '" << furnace::printable(o.lesson)
                              << "' (furnace lesson list shows them)";
    const int steps = static_cast<int>((*lessons.view().lessons)[static_cast<size_t>(index)].steps.size());
    FURNACE_CHECK(o.lesson_step >= 1 && o.lesson_step <= steps)
        << "--lesson-step must be in [1, " << steps << "] for " << o.lesson << " (got " << o.lesson_step << ")";
  }
}

}  // namespace

int main(int argc, char** argv) {
  furnace::install_stop_signals();  // Ctrl-C, SIGTERM, SIGHUP: the window closes as its button does
  furnace::ignore_file_size_signal();  // past ulimit -f a write fails (EFBIG) and is reported, not fatal
  Options o;
  furnace::Scenario& s = o.scenario;
  CLI::App cli{"furnace-viz: watch a Scenario train live on the (simulated) runtime"};
  cli.add_option("--topology", s.topology, "machine: a name in data/topologies or a .toml path")->capture_default_str();
  cli.add_option("--backend", s.backend, "sim (CPU, modelled GPU clock) or cuda")->capture_default_str();
  cli.add_option("--epochs", s.epochs, "passes over the training set")->capture_default_str();
  cli.add_option("--batch", s.batch, "batch size")->capture_default_str();
  cli.add_option("--lr", s.lr, "learning rate")->capture_default_str();
  cli.add_option("--hidden", o.hidden, "hidden layer widths, comma-separated")->capture_default_str();
  cli.add_option("--seed", s.seed, "seed for initialisation and shuffling")->capture_default_str();
  cli.add_option("--data", s.data_dir, "MNIST-format folder (default: Debian's Fashion-MNIST)");
  cli.add_option("--steps", s.max_steps, "stop after this many optimizer steps");
  cli.add_option("--parallel", s.parallel, "none; dp: torch.nn.DataParallel over --device-ids; ddp: "
                 "DistributedDataParallel, one process (rank) per GPU as torchrun starts them")->capture_default_str();
  cli.add_option("--nproc", s.nproc, "with --parallel ddp: ranks (torchrun --nproc-per-node; default: one per visible GPU)");
  cli.add_option("--device-ids", o.device_ids, "DataParallel's device_ids, comma-separated (default: all visible)");
  cli.add_option("--output-device", o.output_device, "DataParallel's output_device (default: device_ids[0])");
  cli.add_option("--amp", s.amp, "mixed precision: off, fp16 (autocast + GradScaler) or bf16")->capture_default_str();
  cli.add_option("--accum", s.accum, "gradient accumulation: micro-batches per optimizer step")->capture_default_str();
  cli.add_option("--device", s.device, "logical device ordinal (cuda:N) to train on")->capture_default_str();
  cli.add_option_function<std::string>("--visible", [&o](const std::string& v) { o.visible = v; },
                                       "CUDA_VISIBLE_DEVICES of the training process (default: this shell's)");
  cli.add_option_function<std::string>("--order", [&o](const std::string& v) { o.order = v; },
                                       "CUDA_DEVICE_ORDER: FASTEST_FIRST or PCI_BUS_ID (default: this shell's)");
  cli.add_option("--step-delay-ms", o.step_delay_ms, "sleep after each training step (a control)")->capture_default_str();
  cli.add_option("--training-priority", o.training_priority,
                 "idle (trains on CPU time the UI leaves: smooth frames), low, or normal")
      ->capture_default_str()->check(CLI::IsMember({"idle", "low", "normal"}));
  cli.add_option("--lesson", o.lesson, "open the Lesson panel on this lesson (furnace lesson list)");
  cli.add_option("--lesson-step", o.lesson_step, "with --lesson: start at this step (1-based)")->capture_default_str();
  cli.add_option("--lang", o.lang, "the lessons' language: en or zh")->capture_default_str();
  cli.add_flag("--lesson-run", o.lesson_run, "with --lesson: run the step's action and checks at once (exit status 1 if a check fails)");
  cli.add_flag("--paused", o.paused, "start a process that has not used CUDA yet; Run > Restart trains");
  cli.add_option("--trace-file", o.trace_file, "open a Chrome trace in the Timeline (furnace train --trace; "
                                              "dropping a file on the window works too)");
  cli.add_option("--screenshot", o.screenshot, "write the last frame as a PNG (works under Xvfb)");
  cli.add_option("--frames", o.frames, "render this many frames, then exit (0: until closed)")->capture_default_str();
  cli.add_option("--panel", o.panel, "show one panel alone: devices, flow (the Step flow; also 'step_flow'), memory, training, timeline, controls, lesson");
  cli.add_option("--wait-steps", o.wait_steps, "start counting --frames once training reached this step");
  cli.add_option("--stage", o.stage, "Step flow: pause on this phase (scatter, replicate, reduce, ...)")
      ->check(CLI::IsMember(furnace::viz::stage_names()));
  cli.add_option("--size", o.size, "window size WIDTHxHEIGHT")->capture_default_str();
  cli.add_option("--fps", o.fps, "frame rate limit (0: vsync)")->capture_default_str();
  cli.add_flag("--no-cjk", o.no_cjk, "skip the Chinese glyphs (a smaller font atlas)");
  cli.add_flag("--frame-stats", o.frame_stats, "print frame-time percentiles (p50, p99) at exit");
  try {
    furnace::cli::parse_arguments(cli, argc, argv);  // `--name=` is an empty value, never 0
  } catch (const CLI::Success& e) {  // --help
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line (CLI11's own report adds a second, "Run with --help ...").
    std::string line = e.what();  // a mistyped option is named, with the nearest one
    if (dynamic_cast<const CLI::ExtrasError*>(&e))
      if (std::string unknown = furnace::cli::unknown_option_line(cli, argc, argv); !unknown.empty()) line = unknown;
    std::fprintf(stderr, "furnace-viz: %s (see furnace-viz --help)\n", furnace::printable(line).c_str());
    return e.get_exit_code() ? e.get_exit_code() : 2;
  }
  try {
    furnace::viz::ControlsState c;  // the same checks as the Controls panel, before a window opens
    c.scenario = o.scenario;
    c.hidden = o.hidden;
    c.parallel = o.scenario.parallel;
    c.device_ids = o.device_ids;
    c.output_device = o.output_device;
    furnace::viz::scenario_from_controls(c);
    o.lesson_step_given = cli.count("--lesson-step") > 0;
    check_options(o);
    const int rc = run(o);
    // What it printed (the screenshot's line, --frame-stats) must have reached stdout.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "furnace-viz: cannot write to standard output: %s\n", std::strerror(errno));
      return rc ? rc : 1;
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "furnace-viz: %s\n", e.what());
    return 1;
  }
}
