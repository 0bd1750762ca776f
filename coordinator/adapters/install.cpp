// cq-coordinator install (install.hpp).
#include "install.hpp"

#include "cq/run_command.hpp"

#include <fmt/format.h>

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace cq::coord {

namespace fs = std::filesystem;

namespace {

const fs::path defaults_file = "/etc/default/cq-coordinator";

/// chown -R: the service runs as `cq`; install ran as root.
std::string give_to(const fs::path& dir, const char* user) {
  auto* pw = ::getpwnam(user);
  if (!pw)
    return {}; // no such user (not installed from the package): leave it as it is
  std::error_code ec;
  auto own = [&](const fs::path& p) {
    if (::lchown(p.c_str(), pw->pw_uid, pw->pw_gid) != 0)
      throw std::system_error(errno, std::generic_category(), "chown " + p.string());
  };
  try {
    own(dir);
    for (auto& e : fs::recursive_directory_iterator(dir, ec))
      own(e.path());
  } catch (const std::exception& e) {
    return e.what();
  }
  return ec ? fmt::format("cannot list {}: {}", dir.string(), ec.message()) : std::string();
}

} // namespace

fs::path service_state_dir() {
  return "/var/lib/cq-coordinator";
}

std::string install_service(const service_install& s) {
  if (auto why = give_to(s.state_dir, "cq"); !why.empty())
    return why;
  if (!s.start)
    return {}; // nothing outside the state dir
  {
    std::ofstream out(defaults_file, std::ios::trunc);
    out << "# Written by cq-coordinator install: the options cq-coordinator.service runs\n"
           "# with (see cq-coordinator --help). Restart the service after a change.\n"
        << "CQ_COORDINATOR_OPTS=\"" << s.opts << "\"\n";
    out.flush();
    if (!out)
      return fmt::format("cannot write {}", defaults_file.string());
    fmt::print(stderr, "cq-coordinator: wrote {}\n", defaults_file.string());
  }
  if (!cq::systemd_runs())
    return "this machine's init is not systemd: start `cq-coordinator --state " +
           s.state_dir.string() + " " + s.opts + "` from its init system (docs/install.md)";
  if (cq::run_command("cq-coordinator",
                      {"systemctl", "enable", "--now", "cq-coordinator.service"}) != 0)
    return "systemctl could not start cq-coordinator.service (see above; journalctl -u "
           "cq-coordinator)";
  return {};
}

} // namespace cq::coord
