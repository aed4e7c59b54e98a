// png_file: an RGB image as a PNG file, written atomically (furnace/atomic_file.h): a full disk or
// a bad folder leaves no partial PNG and gives one line with the reason. Not here: reading pixels
// from OpenGL (main.cpp).
#pragma once

#include <string>
#include <vector>

namespace furnace::viz {

// Encodes `rgb` (w x h pixels, 3 bytes each, top row first) as PNG. libpng's own messages are
// kept from stderr: a failure throws furnace::Error with libpng's text.
std::string encode_png(const std::vector<unsigned char>& rgb, int w, int h);

// encode_png, then write_file_atomically: throws furnace::Error,
// "cannot write screenshot '<path>': write: No space left on device".
void write_png_file(const std::string& path, const std::vector<unsigned char>& rgb, int w, int h);

}  // namespace furnace::viz
