// LiveFeed: the ring between the training thread and the UI thread.
#include "live_feed.h"

#include <algorithm>

namespace furnace::viz {
namespace {
constexpr size_t kMaxPendingProgress = 8192;  // progress kept while the UI does not pull
}  // namespace

void FeedDelta::clear() {
  events.clear();
  progress.clear();
  memory.clear();
  dropped = 0;
  new_run = false;
  process.reset();
}

LiveFeed::LiveFeed(size_t capacity) : ring_(std::max<size_t>(capacity, 16)) {}

void LiveFeed::begin_run(const std::string& backend, const RunStatus& status) {
  std::lock_guard<std::mutex> lock(mu_);
  read_ = written_;  // events of the previous run are of no interest any more
  progress_.clear();
  memory_.clear();
  status_ = status;
  new_run_ = true;
  backend_ = backend;
  process_.reset();
}

void LiveFeed::set_status(const RunStatus& status) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool initialised = status_.cuda_initialised;  // only on_event sets it within a run
  status_ = status;
  status_.cuda_initialised = status_.cuda_initialised || initialised;
}

void LiveFeed::on_event(const TraceEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_[written_ % ring_.size()] = e;
  ++written_;
  if (e.device >= 0) status_.cuda_initialised = true;  // the process's first device use
  switch (e.kind) {
    case EventKind::alloc:
    case EventKind::free:
    case EventKind::segment_alloc:
    case EventKind::segment_free: {
      if (e.device < 0) break;
      const auto d = static_cast<size_t>(e.device);
      if (d >= memory_.size()) memory_.resize(d + 1);
      MemoryNow& m = memory_[d];
      m.seen = true;
      m.allocated = e.allocated;
      m.reserved = e.reserved;
      m.max_allocated = std::max(m.max_allocated, e.allocated);
      m.max_reserved = std::max(m.max_reserved, e.reserved);
      break;
    }
    default:
      break;
  }
}

void LiveFeed::on_process(const ProcessRecord& p) {
  std::lock_guard<std::mutex> lock(mu_);
  process_ = p;
  status_.cuda_initialised = true;
}

void LiveFeed::on_progress(const Progress& p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (progress_.size() >= kMaxPendingProgress)
    progress_.erase(progress_.begin(), progress_.begin() + static_cast<long>(kMaxPendingProgress / 2));
  progress_.push_back(p);
}

void LiveFeed::pull(FeedDelta& out) {
  out.clear();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t cap = ring_.size();
  if (written_ - read_ > cap) {
    out.dropped = written_ - read_ - cap;
    read_ = written_ - cap;
  }
  out.events.reserve(static_cast<size_t>(written_ - read_));
  for (; read_ < written_; ++read_) out.events.push_back(ring_[read_ % cap]);
  out.progress.swap(progress_);
  progress_.clear();
  out.memory = memory_;
  for (MemoryNow& m : memory_) {  // the next interval's peaks start from the current values
    m.max_allocated = m.allocated;
    m.max_reserved = m.reserved;
  }
  out.status = status_;
  if (new_run_) {
    out.new_run = true;
    out.backend = backend_;
    new_run_ = false;
  }
  if (process_) {
    out.process = std::move(process_);
    process_.reset();
  }
}

}  // namespace furnace::viz
