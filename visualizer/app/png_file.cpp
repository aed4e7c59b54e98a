// PNG encoding into memory with libpng, then an atomic write (png_file.h).
#include "png_file.h"

#include <png.h>  // defines: png_* (libpng: better compression than stb's writer)

#include "furnace/atomic_file.h"  // defines: write_file_atomically
#include "furnace/error.h"

namespace furnace::viz {
namespace {

struct Sink {
  std::string bytes;
  std::string error;
};

void on_write(png_structp png, png_bytep data, png_size_t n) {
  static_cast<Sink*>(png_get_io_ptr(png))->bytes.append(reinterpret_cast<const char*>(data), n);
}
void on_flush(png_structp) {}
void on_error(png_structp png, png_const_charp message) {
  static_cast<Sink*>(png_get_error_ptr(png))->error = message ? message : "libpng error";
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}  // nothing libpng warns about changes the file

}  // namespace

std::string encode_png(const std::vector<unsigned char>& rgb, int w, int h) {
  Sink sink;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  // volatile: setjmp's rule for a local read after longjmp returns to it
  volatile bool ok = png && info;
  if (ok && setjmp(png_jmpbuf(png)) == 0) {
    png_set_write_fn(png, &sink, on_write, on_flush);
    png_set_compression_level(png, 9);
    png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    const size_t row = static_cast<size_t>(w) * 3;
    for (int y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(rgb.data() + static_cast<size_t>(y) * row));
    png_write_end(png, nullptr);
  } else {
    ok = false;
  }
  png_destroy_write_struct(png ? &png : nullptr, info ? &info : nullptr);
  FURNACE_CHECK(ok) << "cannot encode the PNG: " << (sink.error.empty() ? "out of memory" : printable(sink.error));
  return std::move(sink.bytes);
}

void write_png_file(const std::string& path, const std::vector<unsigned char>& rgb, int w, int h) {
  write_file_atomically(path, encode_png(rgb, w, h), "cannot write screenshot '" + printable(path) + "'");
}

}  // namespace furnace::viz
