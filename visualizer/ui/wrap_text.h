// wrap_text.h: line breaking for lesson text drawn in a proportional font (the Lesson panel), with
// the rules of furnace/cjk_text.h that the terminal renderer uses too. Not here: measuring text
// (the caller's `measure`: pixels of its font) and drawing.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace furnace::lesson {

// Breaks `text` into lines no wider than `width` as `measure` measures them. A line breaks at
// spaces (the space at the break is dropped, others kept, indentation too) and between two CJK
// characters, never before closing punctuation (，。）”) nor after opening punctuation (（“);
// U+00A0 joins like a letter. A token wider than a line is cut where it overflows. Returns the
// lines joined by '\n' ('\n' in `text` starts a new line). `hanging` (code): the lines a break
// makes start with their line's indentation plus `hanging`, so they read as a continuation.
std::string wrap_text(std::string_view text, double width, const std::function<double(std::string_view)>& measure,
                      std::string_view hanging = {});

}  // namespace furnace::lesson
