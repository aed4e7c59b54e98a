// libFuzzer target for the checkpoint reader (runtime/src/train/checkpoint_file.cpp and
// checkpoint_meta.cpp): `furnace train --resume PATH` reads whatever file it is given. Built with
// clang (-fsanitize=fuzzer,address,undefined) by tests/fuzz/CMakeLists.txt; ctest runs it for a
// bounded time over the seeds in tests/fuzz/corpus/checkpoint/.
//
// Input: byte 0 chooses how the rest becomes a file, so mutations get past the checksum:
//   0: the rest is the file, as is (the checksum almost always catches a mutation);
//   1: the rest is the file without its last 4 bytes; the correct CRC32 is appended;
//   2: the rest is the "meta" JSON, wrapped in a well-formed container with a small model.
// Every file must be accepted or rejected with one furnace::Error line; an accepted file must
// give consistent tensors and survive a round trip (serialize(parse(x)) parses to the same bytes).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "furnace/checkpoint.h"
#include "fuzz_common.h"

namespace {

using namespace furnace;

void append_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void append_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void append_section(std::vector<uint8_t>& out, const std::string& name, const std::vector<uint8_t>& payload) {
  append_u32(out, static_cast<uint32_t>(name.size()));
  out.insert(out.end(), name.begin(), name.end());
  append_u64(out, payload.size());
  out.insert(out.end(), payload.begin(), payload.end());
}
void append_crc(std::vector<uint8_t>& out) {
  append_u32(out, static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), out.data(), static_cast<uInt>(out.size()))));
}

// A model table: "0.weight" (2, 3) and "0.bias" (2); an empty optimizer table.
std::vector<uint8_t> small_model() {
  std::vector<uint8_t> t;
  append_u32(t, 2);
  auto tensor = [&](const std::string& name, std::vector<uint64_t> dims) {
    append_u32(t, static_cast<uint32_t>(name.size()));
    t.insert(t.end(), name.begin(), name.end());
    append_u32(t, static_cast<uint32_t>(dims.size()));
    uint64_t n = 1;
    for (uint64_t d : dims) {
      append_u64(t, d);
      n *= d;
    }
    for (uint64_t i = 0; i < n; ++i) append_u32(t, 0x3f800000u);  // 1.0f
  };
  tensor("0.weight", {2, 3});
  tensor("0.bias", {2});
  return t;
}

std::vector<uint8_t> wrap_meta(const uint8_t* data, size_t size) {
  std::vector<uint8_t> out = {'F', 'U', 'R', 'N', 'C', 'K', 'P', 'T'};
  append_u32(out, kCheckpointVersion);
  append_u32(out, 3);
  append_section(out, "meta", std::vector<uint8_t>(data, data + size));
  append_section(out, "model", small_model());
  std::vector<uint8_t> empty_table;
  append_u32(empty_table, 0);
  append_section(out, "optimizer", empty_table);
  append_crc(out);
  return out;
}

void check_tensors(const std::vector<StateTensor>& tensors) {
  for (const StateTensor& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      fuzz::require(d >= 0, "dimensions are non-negative");
      n *= static_cast<uint64_t>(d);
    }
    fuzz::require(n == t.values.size(), "values match the shape");
    fuzz::require(!t.name.empty(), "tensor names are not empty");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> file;
  switch (data[0] % 3) {
    case 0:
      file.assign(data + 1, data + size);
      break;
    case 1:
      file.assign(data + 1, data + size);
      append_crc(file);
      break;
    default:
      file = wrap_meta(data + 1, size - 1);
      break;
  }
  Checkpoint ck;
  if (!fuzz::accepts([&] { ck = parse_checkpoint(file.data(), file.size(), "fuzz.ckpt"); })) return 0;

  check_tensors(ck.model);
  check_tensors(ck.optimizer_state);
  fuzz::require(ck.step >= 0 && ck.step <= ck.total_steps, "step within the run");
  fuzz::require(ck.tallies.epoch_mean_loss.size() == static_cast<size_t>(ck.loader.epoch), "one mean per epoch");
  // Round trip: what was accepted serializes to a file that parses back to the same state.
  const std::vector<uint8_t> once = serialize_checkpoint(ck);
  Checkpoint again;
  fuzz::require(fuzz::accepts([&] { again = parse_checkpoint(once.data(), once.size(), "again.ckpt"); }),
                "a serialized checkpoint parses");
  fuzz::require(serialize_checkpoint(again) == once, "round trip is stable");
  return 0;
}
