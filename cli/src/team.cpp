// cq node enable|disable, cq token add|ls|revoke, cq audit, cq login; the
// operation ids that make retries safe (SPEC section 9).

#include "commands.hpp"
#include "cq/cli/config.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "hints.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <variant>
#include <vector>

namespace cq::cli {

namespace {
std::string& op_id_slot() {
  static std::string id;
  return id;
}

std::optional<bus::error_info> write_0600(const std::string& path, const std::string& text) {
  if (auto w = sys::write_file(path, text, 0600); !w)
    return w.error();
  return std::nullopt;
}
} // namespace

void pause_before_retry(int i) {
  sys::sleep_ms(200 * (i + 1));
}

std::string random_uuid() {
  return sys::random_uuid();
}

std::int64_t clock_ms() {
  return sys::mono_ms();
}

std::string operation_id() {
  auto& id = op_id_slot();
  if (id.empty())
    id = random_uuid();
  return id;
}

void set_operation_id(std::string id) {
  op_id_slot() = std::move(id);
}

namespace {
int print_node(const bus::result<bus::node_rep>& rep, bool json) {
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(fmt::format("{} {}{}", rep->node.name, rep->node.enabled ? "enabled" : "disabled",
                           rep->node.enabled ? "" : " (" + rep->node.disabled_reason + ")"));
  return 0;
}
} // namespace

int run_node_enable(const std::string& name, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  return print_node(s->call_retrying<bus::node_rep>(bus::node_enable_req{name, operation_id()}),
                    json);
}

int run_node_disable(const std::string& name, const std::optional<std::string>& reason, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  return print_node(
      s->call_retrying<bus::node_rep>(bus::node_disable_req{name, reason, operation_id()}), json);
}

int run_node_diagnostic(const std::string& node, const std::optional<std::string>& job,
                        const std::optional<std::string>& reason, bool json) {
  if (job && !reason)
    return report_error(
        {errc::invalid_argument, "--reason: say why this one run is allowed (it is audited)"},
        json);
  if (!job && reason)
    return report_error({errc::invalid_argument, "--reason goes with a JOB to grant"}, json);
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = job ? s->call_retrying<bus::grant_rep>(
                       bus::node_diagnostic_req{node, *job, *reason, operation_id()})
                 : s->call<bus::grant_rep>(bus::node_diagnostic_show_req{node});
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    fmt::print("{}\n", json_text(*rep));
    return 0;
  }
  if (!rep->grant) {
    print_line(fmt::format("node {} has no diagnostic grant", node));
    return 0;
  }
  auto& g = *rep->grant;
  print_line(fmt::format("node {}: grant for job {} ({}) by {}: {}", g.node, g.job, g.state, g.who,
                         g.reason));
  return 0;
}

int run_token_add(const std::string& name, const std::string& role, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  // Not retried: a retry would make a second token (the first reply is lost).
  auto rep = s->call<bus::token_add_rep>(bus::token_add_req{name, role});
  if (!rep)
    return report_error(rep.error(), json);
  // The token alone on stdout, so `cq token add ann operator > ann.token` works.
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(rep->token);
  return 0;
}

int run_token_ls(bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::token_ls_rep>(bus::token_ls_req{});
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    fmt::print("{}\n", json_text(*rep));
    return 0;
  }
  text_table t;
  t.header = {"NAME", "ROLE", "CREATED"};
  auto now = sys::wall_ms();
  for (auto& k : rep->tokens)
    t.rows.push_back({k.name, k.role,
                      fmt::format("{} ({} ago)", clock_time(k.created_ms, now),
                                  format_age(now - k.created_ms))});
  t.print();
  return 0;
}

int run_token_revoke(const std::string& name, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call_retrying<bus::token_ls_rep>(bus::token_revoke_req{name});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(fmt::format("{}: revoked", name));
  return 0;
}

namespace {

/// The operations an audit row may name: every request's, and the two the
/// coordinator writes of its own accord.
std::vector<std::string> audit_ops() {
  std::vector<std::string> ops{"init_owner", "node_join"};
  [&]<class... Ts>(std::variant<Ts...>*) {
    (ops.emplace_back(Ts::op), ...);
  }(static_cast<bus::coordinator_request*>(nullptr));
  return ops;
}

} // namespace

int run_audit(const audit_options& o) {
  bus::audit_req req;
  if (o.since) {
    std::string error;
    auto ms = parse_duration_ms(*o.since, error);
    if (!ms)
      return report_error({errc::invalid_argument, "--since: " + error}, o.json);
    auto now = sys::wall_ms();
    req.since_ms = std::max<std::int64_t>(0, now - static_cast<std::int64_t>(*ms));
  }
  req.who = o.who, req.op_name = o.op, req.target = o.target;
  // --op: as the audit names it; cq hold and cq release JOB are job_hold
  // rows (their outcome says which). A word it never names is refused (it
  // listed nothing and exited 0).
  if (req.op_name == "hold")
    req.op_name = "job_hold";
  if (auto ops = audit_ops();
      req.op_name && std::find(ops.begin(), ops.end(), *req.op_name) == ops.end()) {
    auto near = nearest_name(*req.op_name, ops);
    return report_error({errc::invalid_argument,
                         fmt::format("--op: no operation '{}'{}", escape_control(*req.op_name),
                                     near.empty() ? std::string("; cq audit's OP column names them")
                                                  : fmt::format("; did you mean {}?", near))},
                        o.json);
  }
  auto s = open_session();
  if (!s)
    return report_error(s.error(), o.json);
  // --target: a job's id prefix or name, as cq ls shows it, is the job's
  // whole id (rows name whole ids); a node's name (first: a job may have
  // the same name) or a hold's id stays.
  auto is_node = [&](const std::string& name) {
    auto nodes = s->call<bus::node_ls_rep>(bus::node_ls_req{});
    return nodes && std::any_of(nodes->nodes.begin(), nodes->nodes.end(),
                                [&](const bus::node_info& n) { return n.name == name; });
  };
  if (req.target && !is_node(*req.target))
    if (auto shown = s->call<bus::show_rep>(bus::show_req{*req.target}))
      req.target = shown->job.id;
  std::vector<bus::audit_info> rows;
  // Every page, in order (a page holds at most audit_page rows).
  for (;;) {
    auto rep = s->call<bus::audit_rep>(req);
    if (!rep)
      return report_error(rep.error(), o.json);
    for (auto& r : rep->rows)
      rows.push_back(std::move(r));
    if (rep->rows.size() < bus::audit_page)
      break;
    req.cursor = rep->cursor;
  }
  if (o.json) {
    bus::audit_rep all{std::move(rows), 0};
    if (!all.rows.empty())
      all.cursor = all.rows.back().id;
    fmt::print("{}\n", json_text(all));
    return 0;
  }
  if (rows.empty()) { // as cq ls says "no jobs", not a bare header
    print_line("no audit rows");
    return 0;
  }
  text_table t;
  t.header = {"ID", "AT", "WHO", "ROLE", "OP", "TARGET", "OUTCOME"};
  t.flex = 5; // a job's id: cut to fit (--json has it whole)
  auto now = sys::wall_ms();
  for (auto& r : rows)
    t.rows.push_back(
        {std::to_string(r.id), clock_time(r.at_ms, now), r.who, r.role, r.op, r.target, r.outcome});
  t.print();
  return 0;
}

int run_login(const login_options& o) {
  auto dir = config_dir();
  if (!dir)
    return report_error(dir.error(), false);
  if (o.token.empty() || o.token.find_first_of(" \t\r\n") != std::string::npos)
    return report_error({errc::invalid_argument, "TOKEN: give the token as one word"}, false);
  std::string url = o.url.find("://") == std::string::npos ? "tcp://" + o.url : o.url;
  if (o.server_key && o.server_key->size() != 40)
    return report_error(
        {errc::invalid_argument, "--server-key: a CURVE public key is 40 Z85 characters"}, false);
  // Every argument checked before anything is written.
  if (o.local_socket) {
    struct stat st {};
    if (o.local_socket->empty() || o.local_socket->front() != '/' ||
        ::stat(o.local_socket->c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
      return report_error({errc::invalid_argument,
                           fmt::format("--local-socket: {} is not a Unix socket (give the "
                                       "absolute path cq-coordinator --local-socket serves)",
                                       *o.local_socket)},
                          false);
  }
  if (::mkdir(dir->c_str(), 0700) != 0 && errno != EEXIST)
    return report_error(
        {errc::internal, fmt::format("cannot create {}: {}", *dir, std::strerror(errno))}, false);
  // The profile as it was: put back if the new one does not work (a typed
  // token or address must not cost a working login).
  std::vector<std::pair<std::string, std::optional<std::string>>> before;
  for (auto path : {token_path(*dir), *dir + "/url", *dir + "/local", *dir + "/server.key"}) {
    std::optional<std::string> bytes;
    if (std::ifstream in(path, std::ios::binary); in)
      bytes = std::string(std::istreambuf_iterator<char>(in), {});
    before.emplace_back(path, std::move(bytes));
  }
  auto keep_before = [&](bus::error_info e) {
    // A coordinator that does not answer yet (it is starting) says nothing
    // against the profile: where there was none it is kept, unchecked.
    if (e.code == errc::unavailable && !before.front().second) {
      e.message += "; the profile is saved, unchecked";
      return report_error(e, false);
    }
    for (auto& [path, bytes] : before)
      if (bytes)
        (void)write_0600(path, *bytes);
      else
        ::unlink(path.c_str());
    e.message +=
        before.front().second ? "; the profile as it was is kept" : "; no profile was saved";
    return report_error(e, false);
  };
  if (auto e = write_0600(token_path(*dir), o.token + "\n"))
    return report_error(*e, false);
  if (auto e = write_0600(*dir + "/url", url + "\n"))
    return keep_before(*e);
  auto local_path = *dir + "/local";
  if (o.local_socket) {
    if (auto e = write_0600(local_path, local_record(*o.local_socket, url)))
      return keep_before(*e);
  } else {
    ::unlink(local_path.c_str());
  }
  auto key_path = *dir + "/server.key";
  if (o.server_key) {
    if (auto e = write_0600(key_path, *o.server_key + "\n"))
      return keep_before(*e);
  } else {
    ::unlink(key_path.c_str());
  }
  // Check the profile works before saying so.
  auto s = open_session();
  if (!s)
    return keep_before(s.error());
  auto rep = s->call<bus::node_ls_rep>(bus::node_ls_req{});
  if (!rep && rep.error().code != errc::permission_denied)
    return keep_before(rep.error());
  print_line(fmt::format("logged in to {} (profile {})", url, *dir));
  return 0;
}

int run_clean(const std::optional<std::string>& older_than, bool dry_run, bool json) {
  std::uint64_t older_ms = 0;
  if (older_than) {
    std::string why;
    auto ms = parse_duration_ms(*older_than, why);
    if (!ms)
      return report_error({errc::invalid_argument, fmt::format("--older-than: {}", why)}, json);
    older_ms = *ms;
  }
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  bus::clean_req req{older_ms};
  if (dry_run)
    req.dry_run = true; // only then: a coordinator before it refuses the field
  auto rep = s->call<bus::clean_rep>(req);
  if (!rep)
    return report_error(rep.error(), json);
  auto which = older_than ? " that ended more than " + *older_than + " ago" : std::string();
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else if (dry_run)
    print_line(fmt::format("would forget {} finished job{}{}; nothing changed", rep->forgotten,
                           rep->forgotten == 1 ? "" : "s", which));
  else
    print_line(fmt::format("forgot {} finished job{}{}{}", rep->forgotten,
                           rep->forgotten == 1 ? "" : "s", which,
                           rep->forgotten ? "; their nodes delete their logs and files" : ""));
  return 0;
}

} // namespace cq::cli
