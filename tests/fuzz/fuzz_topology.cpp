// libFuzzer target for topology files (data/topologies/*.toml, `--topology path.toml`): the TOML
// text goes through parse_topology (runtime/src/machine/topology.cpp, toml++ compiled in
// header-only mode so the fuzzer sees its branches too). Every input is accepted as a machine that
// keeps the schema's promises, or rejected with one clear line. And toml_ascii
// (runtime/src/machine/toml_guard.cpp), which every TOML reader runs first, must keep the
// document: where toml++ can read the original safely, both texts give equal tables or both fail.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <toml++/toml.h>

#include "furnace/topology.h"
#include "fuzz_common.h"
#include "furnace/toml_reader.h"  // defines: toml_ascii, toml_type_name, nearest_name

namespace {

using namespace furnace;
using fuzz::require;

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

void check(const Topology& t) {
  require(!t.gpus.empty(), "at least one GPU");
  require(!t.description.empty() && !t.source.empty(), "description and source");
  require(finite_positive(t.host.pinned_bandwidth) && finite_positive(t.host.pageable_bandwidth) &&
              finite_positive(t.host.latency_s),
          "host figures positive and finite");
  std::set<std::string> uuids, buses;
  for (const GpuSpec& g : t.gpus) {
    require(g.uuid.size() == 40 && g.uuid.rfind("GPU-", 0) == 0, "uuid in nvidia-smi form");
    require(g.pci_bus_id.size() == 16, "bus id in nvidia-smi form");
    require(uuids.insert(g.uuid).second && buses.insert(g.pci_bus_id).second, "unique ids");
    require(g.context_bytes > 0 && g.context_bytes < g.memory_bytes, "0 < context < memory");
    require(g.sm_count > 0 && g.compute_capability_major > 0 && g.compute_capability_minor >= 0, "sm count, cc");
    for (double v : {g.peak_flops_f32, g.peak_flops_f16, g.peak_flops_bf16, g.memory_bandwidth, g.launch_latency_s})
      require(finite_positive(v), "GPU figures positive and finite");
  }
  const int n = static_cast<int>(t.gpus.size());
  for (const LinkSpec& l : t.links) {
    require(l.a >= 0 && l.a < n && l.b >= 0 && l.b < n && l.a != l.b, "links join two GPUs of the machine");
    require(l.kind == LinkKind::pcie || l.kind == LinkKind::nvlink, "link kind from the file");
    require(finite_positive(l.bandwidth) && finite_positive(l.latency_s), "link figures positive and finite");
  }
  // link_between answers for every pair (a machine of many GPUs: the first few rows only).
  for (int a = 0; a < std::min(n, 16); ++a)
    for (int b = 0; b < n; ++b) {
      const LinkSpec l = t.link_between(a, b);
      require(finite_positive(l.bandwidth), "link_between has a bandwidth");
    }
  require(!fuzz::accepts([&] { t.link_between(0, n); }), "a GPU past the end has no link");
}

// True when toml++ 3.3.0 can parse `text` without reaching its TOML_UNREACHABLE: no code point in
// U+00A1..U+0499, U+2D0E..U+3107 or U+FB36..U+FEFE (furnace/toml_reader.h), read leniently.
bool safe_for_tomlpp(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || i + n > text.size()) return true;  // toml++ stops at invalid UTF-8 first
    char32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    if ((cp >= 0xA1 && cp <= 0x499) || (cp >= 0x2D0E && cp <= 0x3107) || (cp >= 0xFB36 && cp <= 0xFEFE)) return false;
    i += n;
  }
  return true;
}

std::optional<toml::table> parse_or_nothing(const std::string& text) {
  try {
    return toml::parse(std::string_view(text), std::string_view("fuzz.toml"));
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

void check_ascii_form(const std::string& text) {
  std::string ascii;
  if (!fuzz::accepts([&] { ascii = toml_ascii(text, "fuzz.toml"); })) return;
  for (char c : ascii) require(static_cast<unsigned char>(c) < 0x80, "toml_ascii gives ASCII");
  if (!safe_for_tomlpp(text)) return;
  const std::optional<toml::table> original = parse_or_nothing(text), rewritten = parse_or_nothing(ascii);
  require(original.has_value() == rewritten.has_value(), "toml_ascii keeps a document valid or invalid");
  if (original) require(*original == *rewritten, "toml_ascii keeps every value");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Topology t;
  if (fuzz::accepts([&] { t = parse_topology(text, "fuzz.toml"); })) check(t);
  check_ascii_form(text);
  return 0;
}
