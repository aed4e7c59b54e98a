// backend/sim/host_pages: the host memory behind a simulated GPU's allocations, shared by
// SimBackend and SimMachine. Not here: the simulated capacity (the callers cap it first).
#pragma once

#include <cstddef>
#include <string>

namespace furnace {

// Maps `bytes` of host memory for an allocation on the simulated GPU `gpu_name`, lazily backed
// (MAP_NORESERVE: a page costs host memory only once an op writes it). When the host refuses
// (ulimit -v, a container's limit, the machine's RAM), throws furnace::Error, one line, saying it
// is host memory that ran out, how much was asked and why: never the simulated GPU's OOM.
void* map_host_pages(size_t bytes, const std::string& gpu_name);
void unmap_host_pages(void* p, size_t bytes);

}  // namespace furnace
