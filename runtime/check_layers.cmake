# The layer rule, checked as part of the build: a layer includes only layers below it.
#   cmake -DROOT=<runtime folder> -DSTAMP=<file to touch> -P check_layers.cmake
# Each layer's public headers live in include/<layer>/furnace/, so a layer target simply does not
# see the public headers of the layers above it (an upward `#include "furnace/x.h"` fails to
# compile). This script also holds the private headers (src/<layer>/...) to the rule, which the
# compiler cannot: every runtime target shares the src/ root. One line per upward include, then
# the build stops.
cmake_minimum_required(VERSION 3.25)

# Bottom up. Layers on one rank do not include each other (nn and data; amp and parallel).
set(FURNACE_LAYER_RANKS core=0 machine=1 trace=2 backend=3 memory=4 runtime=5 ops=6 nn=7 data=7
                        amp=8 parallel=8 dist=9 train=10 lessons=11)
foreach(entry IN LISTS FURNACE_LAYER_RANKS)
  string(REPLACE "=" ";" pair "${entry}")
  list(GET pair 0 layer)
  list(GET pair 1 rank)
  set(rank_of_${layer} ${rank})
  list(APPEND layers ${layer})
endforeach()

# Public header name -> layer, from where each one lives.
foreach(layer IN LISTS layers)
  file(GLOB headers RELATIVE "${ROOT}/include/${layer}/furnace" "${ROOT}/include/${layer}/furnace/*.h")
  foreach(h IN LISTS headers)
    set(layer_of_header_${h} ${layer})
  endforeach()
endforeach()

set(problems "")
foreach(layer IN LISTS layers)
  file(GLOB_RECURSE files "${ROOT}/src/${layer}/*.h" "${ROOT}/src/${layer}/*.cpp" "${ROOT}/src/${layer}/*.cu"
       "${ROOT}/src/${layer}/*.cuh" "${ROOT}/src/${layer}/*.inc" "${ROOT}/include/${layer}/furnace/*.h")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" target "${line}")
      set(to "")
      if(target MATCHES "^furnace/(.+)$")
        set(h "${CMAKE_MATCH_1}")
        if(DEFINED layer_of_header_${h})
          set(to ${layer_of_header_${h}})
        else()
          list(APPEND problems "${f}: includes \"${target}\", which no layer has")
        endif()
      elseif(target MATCHES "^([a-z_]+)/")
        if(DEFINED rank_of_${CMAKE_MATCH_1})
          set(to ${CMAKE_MATCH_1})
        endif()
      endif()
      if(to AND NOT to STREQUAL layer)
        if(NOT rank_of_${to} LESS rank_of_${layer})
          file(RELATIVE_PATH rel "${ROOT}" "${f}")
          list(APPEND problems "runtime/${rel}: the ${layer} layer includes \"${target}\" from the ${to} layer, which is not below it")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

if(problems)
  list(JOIN problems "\n" text)
  message(FATAL_ERROR "Furnace's layer rule (core < machine < trace < backend < memory < runtime < ops < nn, data < amp, parallel < dist < train < lessons):\n${text}")
endif()
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
