// What the store's tests share: a private directory for a store file, an
// open that reports its error, the whole event log, and raw SQL on the file
// through a connection of its own (to stage and inspect what the store's API
// does not show). Test-only.
#ifndef RUNREAPER_STORE_STORE_TEST_UTIL_H_
#define RUNREAPER_STORE_STORE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "runreaper/v1/runreaper.pb.h"
#include "store/run_store.h"

namespace runreaper::store {

// A new directory "<$TEST_TMPDIR or /tmp>/<prefix>XXXXXX"; on failure a
// non-fatal test failure and the unfilled template.
std::string MakeTempDir(absl::string_view prefix);

// RunStore::Open(path, options); on failure a non-fatal test failure naming
// the status, and nullptr.
std::unique_ptr<RunStore> OpenStore(const std::string& path, StoreOptions options = StoreOptions());

// Every event in the store's log, or of `run` (tests keep it under
// kMaxPageSize); on failure a non-fatal test failure and no events.
std::vector<v1::Event> Events(RunStore& store, const std::string& run = "");

// The first column of the first row of `sql`, through a read-write
// connection of its own with a 5 s busy timeout: -1 (RawQueryInt) or
// "<error>" (RawQueryText) when the file cannot be opened, `sql` fails or
// returns no row.
int64_t RawQueryInt(const std::string& path, const std::string& sql);
std::string RawQueryText(const std::string& path, const std::string& sql);

// Runs `sql` (any number of statements) the same way; a test failure when
// the file cannot be opened or a statement fails.
void RawExec(const std::string& path, const std::string& sql);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_STORE_TEST_UTIL_H_
