// FUZZ_CHECK for the properties a fuzz target asserts: on failure it prints
// the condition and aborts, which libFuzzer (and the corpus replay test)
// report as a crash with the input that caused it.
#ifndef RUNREAPER_TESTS_FUZZ_FUZZ_CHECK_H_
#define RUNREAPER_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#endif  // RUNREAPER_TESTS_FUZZ_FUZZ_CHECK_H_
