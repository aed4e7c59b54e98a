// furnace-viz: placeholder until the Dear ImGui + GLFW visualizer lands.
#include <cstdio>

int main() {
  std::fprintf(stderr,
               "furnace-viz: the visualizer is not built yet; run `furnace train --trace out.json` "
               "and open the trace in https://ui.perfetto.dev meanwhile\n");
  return 2;
}
