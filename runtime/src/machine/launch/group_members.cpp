// Live members of a process group (group_members.h).
#include "machine/launch/group_members.h"

#include <dirent.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace furnace::launch {
namespace {

#ifdef __linux__
// From /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses,
// so the fields are counted from the last ')'.
bool live_member(const char* pid, pid_t pgid) {
  char path[64], text[512];
  std::snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  const size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  text[n] = '\0';
  const char* close = std::strrchr(text, ')');
  char state = 0;
  long ppid = 0, pgrp = 0;
  if (!close || std::sscanf(close + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) return false;
  return pgrp == pgid && state != 'Z' && state != 'X';
}
#endif

}  // namespace

bool group_has_live_process(pid_t pgid) {
  if (::killpg(pgid, 0) != 0) return false;
#ifdef __linux__
  DIR* proc = ::opendir("/proc");
  if (!proc) return true;
  bool found = false;
  while (const dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    if ((found = live_member(e->d_name, pgid))) break;
  }
  ::closedir(proc);
  return found;
#else
  return true;
#endif
}

}  // namespace furnace::launch
