// Whether a worker's process group still has a live process: kill(-pgid, 0) also counts zombies,
// and the zombie of an orphan stays until init reaps it (in a container, maybe never), so on
// Linux the answer comes from /proc. Not here: signalling the group (worker_group.cpp).
#pragma once

#include <sys/types.h>

namespace furnace::launch {

bool group_has_live_process(pid_t pgid);

}  // namespace furnace::launch
