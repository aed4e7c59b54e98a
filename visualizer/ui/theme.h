// furnace-viz theme: the palette every panel draws with (one colour per meaning: allocated,
// reserved, context, each stage kind, links), the ImGui style, and the fonts: a Latin font and a
// CJK font merged into it, found by fontconfig and loaded by FreeType, with a fallback to ImGui's
// built-in font.
#pragma once

#include <string>

#include <imgui.h>

#include "step_flow.h"  // defines: StageKind

namespace furnace::viz {

namespace colors {
// IM_COL32(r, g, b, a) is (a << 24 | b << 16 | g << 8 | r).
constexpr ImU32 rgb(unsigned r, unsigned g, unsigned b, unsigned a = 255) {
  return (a << 24) | (b << 16) | (g << 8) | r;
}
constexpr ImU32 kPanel = rgb(32, 35, 42);  // the clear colour: windows draw no background
constexpr ImU32 kText = rgb(225, 228, 235);
constexpr ImU32 kTextDim = rgb(140, 146, 160);
constexpr ImU32 kGrid = rgb(60, 64, 74);
// A physical GPU box: the screenshot test looks for exactly this fill.
constexpr ImU32 kGpuBox = rgb(46, 84, 122);
constexpr ImU32 kGpuBoxBorder = rgb(110, 170, 230);
constexpr ImU32 kLogicalBox = rgb(58, 110, 72);
constexpr ImU32 kHost = rgb(84, 76, 60);
constexpr ImU32 kAllocated = rgb(92, 196, 120);
constexpr ImU32 kReserved = rgb(70, 130, 200);
constexpr ImU32 kContext = rgb(150, 110, 190);
constexpr ImU32 kFree = rgb(44, 48, 56);
constexpr ImU32 kPeak = rgb(255, 210, 90);
constexpr ImU32 kWarning = rgb(240, 160, 70);
constexpr ImU32 kError = rgb(235, 90, 80);
constexpr ImU32 kNvlink = rgb(118, 185, 0);   // NVIDIA green
constexpr ImU32 kPcie = rgb(170, 170, 180);
constexpr ImU32 kLoss = rgb(240, 120, 90);
constexpr ImU32 kAccuracy = rgb(90, 200, 220);
constexpr ImU32 kKernel = rgb(80, 140, 210);
constexpr ImU32 kCopy = rgb(230, 170, 60);
}  // namespace colors

ImU32 stage_color(StageKind k);
ImU32 with_alpha(ImU32 c, float alpha);

void apply_theme(ImGuiStyle& style);

struct FontReport {
  std::string latin;         // the file used, empty: ImGui's built-in font
  std::string latin_family;  // its family as fontconfig names it (or the variable that named it)
  std::string cjk;           // the file merged for Chinese, empty: none found
  std::string cjk_family;
  bool cjk_wanted = false;   // load_fonts was asked for Chinese glyphs
  std::string warnings;      // each font passed over (from $FURNACE_VIZ_FONT, $FURNACE_VIZ_CJK_FONT or
                             // fontconfig) with the reason FreeType gave
  // One line: which fonts were chosen, and why another was passed over or none found.
  std::string summary() const;
  // The choice fell back: a font was passed over, or Chinese was wanted and none found.
  bool fell_back() const { return !warnings.empty() || (cjk_wanted && cjk.empty()); }
};
// Adds the fonts to io.Fonts and makes FreeType the atlas builder (call before the atlas is
// built). Fonts are found by fontconfig: the best sans-serif for lang=en, and for lang=zh-cn merged
// into it; each file is opened by FreeType first. `cjk` false skips the Chinese glyphs (faster
// atlas, for tests). $FURNACE_VIZ_FONT and $FURNACE_VIZ_CJK_FONT name a file that comes first.
// `extra_text`: text whose every glyph must be there besides ImGui's common Chinese set (the
// lessons' text: it uses characters outside those 2,500).
FontReport load_fonts(ImGuiIO& io, float size_px, bool cjk = true, const std::string& extra_text = "");

}  // namespace furnace::viz
