#pragma once
// What --version prints: the project's version and the commit it was built
// from (cmake/version.cmake writes the definitions at build time).

namespace cq {

/// The project's version (CMake's project(VERSION)), e.g. "0.1.0".
const char* version();
/// The commit built: 12 hex digits, "-modified" when the tree had changes,
/// or "unknown" outside git (a source tarball; $CQ_COMMIT names it then).
const char* commit();

} // namespace cq
