// Theme and fonts: fontconfig finds them (font_search.h), FreeType checks and loads them.
#include "theme.h"

#include <imgui_freetype.h>  // defines: ImGuiFreeType::GetBuilderForFreeType (in Debian's libimgui.a)

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "font_file.h"      // defines: font_file_problem (FreeType)
#include "lang.h"           // defines: ui_glyphs
#include "font_search.h"    // defines: find_font, FoundFont (fontconfig)
#include "furnace/error.h"  // defines: printable

namespace furnace::viz {
namespace {

// The font to draw `lang` with: the file $env names when FreeType can draw `probe` from it, else
// fontconfig's best installed font for `lang` that FreeType can. Each file passed over is noted in
// `warnings` with the reason; a file $env names that does not exist is passed over silently.
FoundFont choose_font(const char* env, const char* lang, char32_t probe, std::string& warnings) {
  auto note = [&](const std::string& what, const std::string& problem) {
    warnings += (warnings.empty() ? "" : "; ") + what + " is passed over: " + problem;
  };
  if (const char* p = std::getenv(env); p && *p && std::filesystem::exists(p)) {
    const std::string problem = font_file_problem(p, 0, probe);
    if (problem.empty()) return {p, 0, env};
    note(std::string(env) + "=" + printable(p), problem);
  }
  std::vector<std::string> skip;
  for (int tries = 0; tries < 4; ++tries) {
    FoundFont f = find_font(lang, skip);
    if (f.file.empty()) break;
    const std::string problem = font_file_problem(f.file, f.index, probe);
    if (problem.empty()) return f;
    note(f.family + " (" + f.file + ", fontconfig's match for lang=" + lang + ")", problem);
    skip.push_back(f.file);
  }
  return {};
}

ImVec4 v4(ImU32 c) { return ImGui::ColorConvertU32ToFloat4(c); }

// Latin, Greek, punctuation, arrows, the math symbols of the step flow (sum, nabla, partial) and
// geometric shapes. ImGui keeps a pointer to it until the atlas is built, hence namespace scope.
constexpr ImWchar kLatinRanges[] = {0x0020, 0x00FF, 0x0370, 0x03FF, 0x2010, 0x205E, 0x2190, 0x21FF,
                                    0x2200, 0x22FF, 0x25A0, 0x25FF, 0};

}  // namespace

ImU32 stage_color(StageKind k) {
  switch (k) {
    case StageKind::host_to_device: return colors::rgb(200, 170, 90);
    case StageKind::scatter: return colors::rgb(230, 170, 60);
    case StageKind::replicate: return colors::rgb(180, 120, 220);
    case StageKind::forward: return colors::rgb(80, 150, 230);
    case StageKind::gather: return colors::rgb(230, 130, 60);
    case StageKind::gather_backward: return colors::rgb(200, 150, 110);
    case StageKind::loss: return colors::kLoss;
    case StageKind::backward: return colors::rgb(60, 190, 190);
    case StageKind::reduce: return colors::rgb(220, 90, 150);
    case StageKind::all_reduce: return colors::rgb(240, 110, 120);
    case StageKind::optimizer: return colors::rgb(110, 200, 100);
    case StageKind::scaler: return colors::rgb(240, 210, 80);
    case StageKind::other: return colors::rgb(150, 150, 160);
  }
  return colors::kText;
}

ImU32 with_alpha(ImU32 c, float alpha) {
  const unsigned a = static_cast<unsigned>(alpha < 0 ? 0 : alpha > 1 ? 255 : alpha * 255.0f);
  return (c & 0x00FFFFFFu) | (a << 24);
}

void apply_theme(ImGuiStyle& style) {
  ImGui::StyleColorsDark(&style);
  // Square corners and no anti-aliased fill fringes: crisp axis-aligned shapes with fewer
  // triangles, which a software renderer (llvmpipe) draws noticeably faster. Lines stay smooth.
  style.WindowRounding = 0;
  style.FrameRounding = 0;
  style.GrabRounding = 0;
  style.AntiAliasedFill = false;
  style.WindowPadding = ImVec2(8, 6);
  style.FramePadding = ImVec2(6, 3);
  style.ItemSpacing = ImVec2(8, 4);
  style.WindowBorderSize = 1;
  ImVec4* c = style.Colors;
  // Windows draw no background: the app clears to kPanel and the panels tile the screen. With a
  // software renderer (Mesa's llvmpipe under Xvfb) every full-screen layer costs milliseconds.
  c[ImGuiCol_WindowBg] = ImVec4(0, 0, 0, 0);
  c[ImGuiCol_ChildBg] = ImVec4(0, 0, 0, 0);
  c[ImGuiCol_PopupBg] = v4(colors::rgb(28, 30, 36, 245));
  c[ImGuiCol_Text] = v4(colors::kText);
  c[ImGuiCol_TextDisabled] = v4(colors::kTextDim);
  c[ImGuiCol_TitleBg] = v4(colors::rgb(38, 42, 52));
  c[ImGuiCol_TitleBgActive] = v4(colors::rgb(48, 62, 84));
  c[ImGuiCol_MenuBarBg] = v4(colors::rgb(30, 33, 40));
  c[ImGuiCol_FrameBg] = v4(colors::rgb(44, 48, 58));
  c[ImGuiCol_FrameBgHovered] = v4(colors::rgb(56, 64, 80));
  c[ImGuiCol_Button] = v4(colors::rgb(52, 74, 104));
  c[ImGuiCol_ButtonHovered] = v4(colors::rgb(66, 96, 136));
  c[ImGuiCol_ButtonActive] = v4(colors::rgb(80, 116, 160));
  c[ImGuiCol_Header] = v4(colors::rgb(52, 74, 104));
  c[ImGuiCol_PlotLines] = v4(colors::kLoss);
  c[ImGuiCol_PlotHistogram] = v4(colors::kAllocated);
  c[ImGuiCol_Border] = v4(colors::rgb(58, 62, 72));
}

std::string FontReport::summary() const {
  std::string out = "fonts: Latin " + (latin.empty() ? std::string("ImGui's built-in font (no Latin font found by fontconfig)")
                                               : latin_family + " (" + latin + ")");
  if (cjk_wanted)
    out += cjk.empty() ? ", no Chinese font (fontconfig knows none for lang=zh-cn: Chinese shows as '?'; "
                         "apt-get install fonts-wqy-microhei or fonts-noto-cjk)"
                       : ", Chinese " + cjk_family + " (" + cjk + ")";
  if (!warnings.empty()) out += "; " + warnings;
  return out;
}

FontReport load_fonts(ImGuiIO& io, float size_px, bool cjk, const std::string& extra_text) {
  FontReport r;
  r.cjk_wanted = cjk;
  // FreeType rasterises the atlas (ImGui's FreeType builder, in Debian's libimgui.a): the loader
  // that copes with broken files, and it hints CJK glyphs better at small sizes than stb_truetype.
  io.Fonts->FontBuilderIO = ImGuiFreeType::GetBuilderForFreeType();
  io.Fonts->FontBuilderFlags = 0;  // the font's own hinting
  const FoundFont latin = choose_font("FURNACE_VIZ_FONT", "en", U'A', r.warnings);
  ImFont* base = nullptr;
  if (!latin.file.empty()) {
    ImFontConfig cfg;
    cfg.FontNo = latin.index;
    cfg.PixelSnapH = true;
    base = io.Fonts->AddFontFromFileTTF(latin.file.c_str(), size_px, &cfg, kLatinRanges);
    if (base) r.latin = latin.file, r.latin_family = latin.family;
  }
  if (!base) {
    ImFontConfig cfg;
    cfg.SizePixels = 13;
    base = io.Fonts->AddFontDefault(&cfg);
  }
  if (!cjk) return r;
  const FoundFont chinese = choose_font("FURNACE_VIZ_CJK_FONT", "zh-cn", U'\u4E2D', r.warnings);
  if (!chinese.file.empty()) {
    ImFontConfig cfg;
    cfg.MergeMode = true;
    cfg.FontNo = chinese.index;
    cfg.PixelSnapH = true;
    // The ranges must outlive the atlas build: one set per process is enough.
    static ImVector<ImWchar> ranges;
    ImFontGlyphRangesBuilder builder;
    builder.AddRanges(io.Fonts->GetGlyphRangesChineseSimplifiedCommon());
    builder.AddText(extra_text.c_str());
    builder.AddText(ui_glyphs());
    ranges.clear();
    builder.BuildRanges(&ranges);
    if (io.Fonts->AddFontFromFileTTF(chinese.file.c_str(), size_px, &cfg, ranges.Data))
      r.cjk = chinese.file, r.cjk_family = chinese.family;
  }
  return r;
}

}  // namespace furnace::viz
