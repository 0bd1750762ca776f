#pragma once
// The store's schema history (schema.cpp): SQL that migrates the database
// from version i to i + 1 (PRAGMA user_version), applied in order at open.

#include <span>

namespace cq::coord {

/// Every migration, oldest first. Only ever append.
std::span<const char* const> migrations();

} // namespace cq::coord
