// tests/standin/standin_streams.h (private to the stand-in library): what the stand-in's NCCL
// (nccl_standin.cpp) needs from its CUDA runtime (cuda_standin.cpp): work queued on a stream.
#pragma once

#include <cuda_runtime_api.h>

namespace furnace_standin {

// New work on stream `s`, as a kernel or copy would be. `never_completes`: a query never finds it
// done (a collective whose peers never come); synchronizing still completes it, as the stand-in
// has no device that could hang.
void give_stream_work(cudaStream_t s, bool never_completes);
// What ncclCommAbort does to a stalled collective: its kernel ends, the stream's work completes.
void end_stalled_work(cudaStream_t s);

}  // namespace furnace_standin
