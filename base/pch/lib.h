// The prefix of every translation unit of runreaper's own code (its PCH is
// //base/pch:lib; pch.bzl, docs/CONTRIBUTING.md "Build"): the external
// headers most of them include, parsed and instantiated once per build
// configuration instead of once per file. Only headers from outside the
// tree and the generated contract: a change to our own headers never
// rebuilds the PCH. Each file still includes what it uses.
#ifndef RUNREAPER_BASE_PCH_LIB_H_
#define RUNREAPER_BASE_PCH_LIB_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"

#endif  // RUNREAPER_BASE_PCH_LIB_H_
