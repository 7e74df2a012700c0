// What a store file is: its tables and indexes, the forward migrations that
// build them, and the settings every connection to the file gets. Internal to
// store/; RunStore::Open is the public entry point (its header documents the
// errors). The schema itself is described in docs/STORE.md.
#ifndef RUNREAPER_STORE_SCHEMA_H_
#define RUNREAPER_STORE_SCHEMA_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/sqlite.h"

namespace runreaper::store::schema {

// The schema version the migrations produce (PRAGMA user_version). To change
// the schema, append a migration in schema.cc and bump this (and
// RunStore::kSchemaVersion, which must equal it).
inline constexpr int kVersion = 18;

// Opens (creating it if missing) the read-write connection to the store file
// at `path` and brings it to kVersion: refuses a directory, a non-regular
// file, a file that is not a SQLite database (DATA_LOSS, nothing written), a
// newer schema or a read-only file (FAILED_PRECONDITION); gives a new file
// auto_vacuum=INCREMENTAL; switches it to WAL with the given synchronous
// level, foreign keys and a 16 MiB page cache; runs the missing migrations
// in one BEGIN IMMEDIATE transaction; converts a file without incremental
// auto_vacuum with one VACUUM (logged; atomic, redone after a crash).
// `busy_timeout` is how long it waits for another connection's lock.
absl::StatusOr<std::unique_ptr<Database>> OpenWriter(const std::string& path,
                                                     absl::Duration busy_timeout,
                                                     bool synchronous_full);

// Opens the read-only connection to `path` (query_only, 16 MiB page cache,
// the same busy timeout). Call it after OpenWriter, once the file is WAL at
// kVersion; INTERNAL when the connection does not see WAL.
absl::StatusOr<std::unique_ptr<Database>> OpenReader(const std::string& path,
                                                     absl::Duration busy_timeout);

}  // namespace runreaper::store::schema

#endif  // RUNREAPER_STORE_SCHEMA_H_
