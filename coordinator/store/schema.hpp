#pragma once
// The store's schema history (schema.cpp): what migrates the database from
// version i to i + 1 (PRAGMA user_version), applied in order at open, each
// in its own transaction.

#include <span>

struct sqlite3;

namespace cq::coord {

/// One step: SQL, or code where SQL alone cannot do it (a row's fields
/// re-encoded); throws std::runtime_error to refuse the upgrade.
struct migration {
  const char* sql = nullptr;
  void (*code)(sqlite3* db) = nullptr;
};

/// Every migration, oldest first. Only ever append.
std::span<const migration> migrations();

/// Version 10: a job row becomes one record (job_record.cpp): the columns
/// queries need, plus every other field of the job in one encoded blob.
void migrate_to_job_records(sqlite3* db);

} // namespace cq::coord
