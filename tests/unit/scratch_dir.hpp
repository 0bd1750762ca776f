#pragma once
// For unit tests that touch the disk: a temporary directory removed with
// everything in it when the test case ends, and a small file's whole text.

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace cq::test {

struct temp_dir {
  std::filesystem::path path;
  /// A new directory /tmp/PREFIX-XXXXXX (under TMPDIR when it is set).
  explicit temp_dir(const std::string& prefix) {
    auto tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

/// The whole text of `file` ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace cq::test
