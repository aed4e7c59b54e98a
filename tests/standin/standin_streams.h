// tests/standin/standin_streams.h (private to the stand-in library): what the stand-in's NCCL
// (nccl_standin.cpp) needs from its CUDA runtime (cuda_standin.cpp): a collective in a stream's
// order. Until it ends, queries of what follows it answer "not ready", synchronizing waits, and
// copies queued behind it wait too (they run when it ends, in stream order).
#pragma once

#include <cuda_runtime_api.h>

namespace furnace_standin {

// Queues a collective at the end of `s`'s work; returns its position there.
long queue_collective(cudaStream_t s);
// Whether everything before `position` on `s` has run (no earlier collective still open), so the
// collective there may move its bytes.
bool ready_for(cudaStream_t s, long position);
// The collective at `position` ended (its bytes moved, or its communicator was aborted): the work
// behind it runs, up to the next open collective.
void end_collective(cudaStream_t s, long position);

}  // namespace furnace_standin
