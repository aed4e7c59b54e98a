// lesson_text.h: lesson text (a lesson::Document) drawn on a terminal for `furnace lesson`:
// wrapped to a width in columns with the line-break rules of furnace/cjk_text.h, optionally with
// ANSI colour. Not here: parsing the Markdown (the lessons engine, furnace/lesson.h).
#pragma once

#include <string>

#include "furnace/lesson.h"  // defines: Document

namespace furnace::lesson {

// The document for a terminal `width` columns wide (CJK characters count two), wrapped at word
// boundaries (any character boundary between CJK characters). `color`: ANSI bold for strong text
// and headings, cyan for code.
std::string render_terminal(const Document& doc, int width = 80, bool color = false);

}  // namespace furnace::lesson
