// `furnace memory`: replays a list of allocations (then frees, then optionally empty_cache)
// through the caching allocator on a simulated GPU of a topology (or, with --capacity, a
// bookkeeping-only device of that size), and shows memory_allocated and memory_reserved after
// every step, the way torch.cuda reports them. Not here: the allocator's rules
// (runtime/src/memory/caching_allocator.cpp).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"           // defines: add_memory_command
#include "text_table.h"         // defines: format_table
#include "furnace/allocator.h"  // defines: CachingAllocator, RawAllocator, format_size, parse_size
#include "furnace/backend.h"    // defines: make_sim_backend
#include "furnace/topology.h"   // defines: load_topology
#include "furnace/error.h"      // defines: Error, OutOfMemoryError, FURNACE_CHECK

namespace furnace::cli {
namespace {

// A device that only keeps books: a capacity, a CUDA context of `context` bytes, and addresses
// from a counter that nobody dereferences (no memory is touched).
class BookkeepingDevice : public RawAllocator {
 public:
  BookkeepingDevice(uint64_t capacity, uint64_t context) : capacity_(capacity), context_(context) {}

  void* raw_malloc(size_t bytes) override {
    if (bytes > capacity_ - context_ - used_) return nullptr;
    const uintptr_t addr = next_;
    next_ += bytes;
    used_ += bytes;
    return reinterpret_cast<void*>(addr);
  }
  void raw_free(void* /*ptr*/, size_t bytes) override { used_ -= bytes; }
  void mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    *free_bytes = capacity_ - context_ - used_;
    *total_bytes = capacity_;
  }
  size_t process_overhead_bytes() override { return context_; }

 private:
  uint64_t capacity_, context_, used_ = 0;
  uintptr_t next_ = uintptr_t(1) << 44;  // 16 TiB: far from any real address, 512-aligned
};

struct MemoryOptions {
  std::vector<std::string> alloc;  // sizes, as typed
  std::vector<std::string> free;   // indices into `alloc`, as typed
  std::string topology = "laptop-4060";
  int device = 0;
  std::string capacity;  // set: a bookkeeping device of this size instead of the topology's GPU
  std::string context = "0";
  bool empty_cache = false;
  bool json = false;
};

std::vector<uint64_t> parse_sizes(const std::vector<std::string>& items) {
  std::vector<uint64_t> out;
  for (const std::string& item : items) {
    try {
      out.push_back(parse_size(item));
    } catch (const Error& e) {
      FURNACE_FAIL() << "--alloc: " << e.what();
    }
  }
  return out;
}

// Indices into the --alloc list, each at most once.
std::vector<int> parse_frees(const std::vector<std::string>& items, size_t n_allocs) {
  std::vector<int> out;
  std::vector<bool> seen(n_allocs, false);
  for (const std::string& item : items) {
    bool digits = !item.empty() && item.size() <= 9;
    for (char c : item) digits = digits && c >= '0' && c <= '9';
    FURNACE_CHECK(digits) << "--free: '" << item
                          << "' is not an index into the --alloc list (0, 1, ...)";
    const int i = std::stoi(item);
    FURNACE_CHECK(static_cast<size_t>(i) < n_allocs)
        << "--free: index " << i << " is out of range: --alloc has " << n_allocs << " size"
        << (n_allocs == 1 ? "" : "s") << " (indices 0.." << n_allocs - 1 << ")";
    FURNACE_CHECK(!seen[i]) << "--free: index " << i << " is freed twice";
    seen[i] = true;
    out.push_back(i);
  }
  return out;
}

void print_json(const std::vector<ReplayStep>& steps) {
  std::string out = "{\"steps\":[";
  for (size_t i = 0; i < steps.size(); ++i) {
    const ReplayStep& s = steps[i];
    out += (i ? ",{" : "{");
    out += "\"op\":\"" + s.op + "\",\"bytes\":" + std::to_string(s.bytes) +
           ",\"allocated\":" + std::to_string(s.allocated) +
           ",\"reserved\":" + std::to_string(s.reserved) + "}";
  }
  out += "]}";
  std::printf("%s\n", out.c_str());
}

void print_table(const std::vector<ReplayStep>& steps, const std::string& label, uint64_t capacity,
                 uint64_t context) {
  std::printf("%s: %s total, %s taken by the CUDA context; PyTorch's caching allocator\n\n",
              label.c_str(), format_size(capacity).c_str(), format_size(context).c_str());
  std::vector<std::vector<std::string>> rows{{"step", "op", "size", "allocated", "reserved", "what happened"}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const ReplayStep& s = steps[i];
    std::string op = s.index >= 0 ? s.op + "[" + std::to_string(s.index) + "]" : s.op;
    rows.push_back({std::to_string(i), op, format_size(s.bytes), format_size(s.allocated),
                    format_size(s.reserved), s.note});
  }
  // step right-aligned, op left, sizes right-aligned, note left.
  std::printf("%s", format_table(rows, {.right = {true, false, true, true, true, false}}).c_str());
}

void print_explanation(uint64_t allocated, uint64_t reserved) {
  if (reserved > allocated) {
    std::printf(
        "\nreserved > allocated by %s: the caching allocator keeps freed blocks and the unused "
        "rest of its segments (2 MiB for requests up to 1 MiB, 20 MiB for 1-10 MiB) for reuse "
        "instead of returning them to the device; empty_cache() (--empty-cache) gives back only "
        "segments that are entirely free.\n",
        format_size(reserved - allocated).c_str());
  } else {
    std::printf("\nreserved == allocated: every reserved byte is inside a live block.\n");
  }
}

void run_memory(const MemoryOptions& o) {
  uint64_t capacity = 0, context = 0;
  std::string label;
  std::unique_ptr<RawAllocator> bookkeeping;
  std::unique_ptr<Backend> backend;
  RawAllocator* device = nullptr;
  if (!o.capacity.empty()) {
    capacity = parse_size(o.capacity);
    context = parse_size(o.context);
    FURNACE_CHECK(context <= capacity) << "--context (" << format_size(context)
                                       << ") is larger than --capacity (" << format_size(capacity)
                                       << ")";
    bookkeeping = std::make_unique<BookkeepingDevice>(capacity, context);
    device = bookkeeping.get();
    label = "device";
  } else {
    const Topology topo = load_topology(o.topology);
    backend = make_sim_backend(topo, nullptr);
    FURNACE_CHECK(o.device >= 0 && o.device < backend->device_count())
        << "CUDA error: invalid device ordinal " << o.device << ": topology '" << topo.name << "' has "
        << backend->device_count() << " GPU(s)";
    const GpuSpec& g = backend->device_spec(o.device);
    capacity = g.memory_bytes;
    context = g.context_bytes;
    device = &backend->raw_allocator(o.device);
    label = "cuda:" + std::to_string(o.device) + " " + g.name + " (" + topo.name + ")";
  }
  const std::vector<uint64_t> sizes = parse_sizes(o.alloc);
  const std::vector<int> frees = parse_frees(o.free, sizes.size());

  CachingAllocator alloc(*device, o.device);
  std::vector<ReplayStep> steps;
  auto finish = [&] {
    if (o.json) {
      print_json(steps);
    } else {
      print_table(steps, label, capacity, context);
    }
  };
  // The order is fixed: every allocation in --alloc order, then the frees in --free order, then
  // empty_cache.
  try {
    replay_allocations(alloc, sizes, frees, o.empty_cache, steps);
  } catch (const OutOfMemoryError&) {
    finish();  // the steps so far, then the error line from main()
    throw;
  }
  finish();
  if (!o.json && !steps.empty()) print_explanation(steps.back().allocated, steps.back().reserved);
}

}  // namespace

void add_memory_command(CLI::App& app) {
  auto opts = std::make_shared<MemoryOptions>();
  CLI::App* sub = app.add_subcommand(
      "memory",
      "replay allocations through PyTorch's caching allocator and show memory_allocated and "
      "memory_reserved after each step");
  sub->add_option("--alloc", opts->alloc,
                  "sizes to allocate, in order, comma-separated (512, 5MiB, 1.5GiB, 30MB)")
      ->required()
      ->delimiter(',');
  sub->add_option("--free", opts->free,
                  "indices into --alloc to free after all allocations, in this order "
                  "(comma-separated)")
      ->delimiter(',');
  sub->add_flag("--empty-cache", opts->empty_cache,
                "call empty_cache() after the frees (returns entirely free segments)");
  sub->add_option("--topology", opts->topology, "machine whose GPU to use (data/topologies)")
      ->capture_default_str();
  sub->add_option("--device", opts->device, "which GPU of the topology (cuda:N)")->capture_default_str();
  sub->add_option("--capacity", opts->capacity,
                  "use a bookkeeping device of this size instead of the topology's GPU");
  sub->add_option("--context", opts->context, "with --capacity: memory taken by the CUDA context")
      ->capture_default_str();
  sub->add_flag("--json", opts->json,
                "print one JSON line: {\"steps\":[{\"op\",\"bytes\",\"allocated\",\"reserved\"}]}");
  sub->footer(
      "Order: all --alloc sizes, then the --free indices, then --empty-cache.\n"
      "Example: furnace memory --alloc 1,5MiB,30MiB --free 0,2 --empty-cache");
  sub->callback([opts] { run_memory(*opts); });
}

}  // namespace furnace::cli
