// Loads cq-coordinator-web.so (adapters/web.hpp) and the --http checks the
// program makes before it.
#include "adapters/web.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace cq::coord {

/// The module's entry point (web_module.cpp).
using start_web_fn = web_sink* (*)(const web_options*, std::string*);

std::unique_ptr<web_sink> start_web(const web_options& o) {
  char exe[4096];
  auto n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    throw std::runtime_error("cannot find this program's directory (/proc/self/exe)");
  auto dir = std::filesystem::path(std::string(exe, static_cast<std::size_t>(n))).parent_path();
  std::string tried, why;
  for (auto candidate :
       {dir / "cq-coordinator-web.so", dir / ".." / "lib" / "cq" / "cq-coordinator-web.so"}) {
    auto path = candidate.lexically_normal().string();
    tried += (tried.empty() ? "" : ", ") + path;
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      if (const char* e = ::dlerror();
          e && std::string(e).find("No such file") == std::string::npos)
        why = e; // there, but it does not load
      continue;
    }
    auto start = reinterpret_cast<start_web_fn>(::dlsym(h, "cq_start_web"));
    if (!start)
      throw std::runtime_error(path + " has no cq_start_web");
    std::string error;
    auto* sink = start(&o, &error);
    if (!sink)
      throw std::runtime_error(error);
    return std::unique_ptr<web_sink>(sink); // the module stays loaded for the process's life
  }
  throw std::runtime_error(why.empty() ? fmt::format("the status page and notifications need "
                                                     "cq-coordinator-web.so (looked at {})",
                                                     tried)
                                       : why);
}

std::string listen_problem(const std::string& listen) {
  auto colon = listen.rfind(':');
  auto bad = fmt::format("--http '{}': give HOST:PORT, e.g. 127.0.0.1:7880", listen);
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
    return bad;
  auto port_text = listen.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stol(port_text) > 65535)
    return bad;
  return {};
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost")
    return true;
  auto h = host.size() > 2 && host.front() == '[' && host.back() == ']'
               ? host.substr(1, host.size() - 2)
               : host;
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) // an address, not a name that starts so
    return (ntohl(v4.s_addr) >> 24) == 127;
  return ::inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

} // namespace cq::coord
