// FURNACE_SANITIZED: defined when this test executable is built with AddressSanitizer or
// ThreadSanitizer (gcc's and clang's spellings), whose runtimes own malloc and quarantine freed
// memory: the steady-state tests (page faults, allocation counts) skip under them.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FURNACE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FURNACE_SANITIZED 1
#endif
#endif
