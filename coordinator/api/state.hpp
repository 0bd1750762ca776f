#pragma once
// The api actor's state and the helpers its handlers share (api/*.cpp):
// an implementation detail of coordinator/api/.

#include "api/array_index.hpp"
#include "api/id_index.hpp"
#include "api/name_index.hpp"
#include "auth/auth.hpp"
#include "auth/permissions.hpp"
#include "coordinator.hpp"
#include "cq/bus/codec.hpp"
#include "cq/bus/job_filter.hpp"
#include "cq/bus/wire_size.hpp"
#include "internal.hpp"
#include "policy/order.hpp"
#include "policy/placement.hpp"
#include "policy/profile.hpp"
#include "policy/spec.hpp"
#include "store/store.hpp"
#include <algorithm>
#include <array>
#include <caf/all.hpp>
#include <deque>
#include <fmt/format.h>
#include <map>
#include <set>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace cq::coord::api_impl {

using namespace cq::actors;

struct node_entry {
  node_row row;
  node_actor handle;
  bus::node_info info;
  std::vector<std::string> peers; ///< the latest connections that authenticated as this node
};

/// How many connections per node the reply routing remembers (a node's own
/// reconnects, and a second daemon the node actor refuses).
constexpr std::size_t peers_per_node = 4;

/// A reader waiting for events (events_req with wait_ms).
struct event_waiter {
  events_query query;
  caf::typed_response_promise<api_reply> rp;
};

/// A peer's allowance of failed authentications: a burst, refilled at a
/// steady rate.
struct auth_limit {
  static constexpr double burst = 10;
  static constexpr double per_s = 1;
  double left = burst;
  std::int64_t at_ms = 0;
  void refill(std::int64_t now) {
    if (at_ms)
      left = std::min(burst, left + static_cast<double>(now - at_ms) * per_s / 1000.0);
    at_ms = now;
  }
  bool allow(std::int64_t now) {
    refill(now);
    return left >= 1;
  }
  void fail(std::int64_t now) {
    refill(now);
    left = std::max(0.0, left - 1);
  }
  bool full(std::int64_t now) const {
    return left + static_cast<double>(now - at_ms) * per_s / 1000.0 >= burst;
  }
  std::int64_t wait_s(std::int64_t now) {
    refill(now);
    return static_cast<std::int64_t>((1 - left) / per_s) + 1;
  }
};
/// The most peers whose failed authentications are remembered.
constexpr std::size_t auth_limit_peers = 10000;

/// A place in the serving order: (level, rank, seq).
using order_key_t = std::tuple<std::uint8_t, std::int64_t, std::uint64_t>;

/// A job in the read model: its fields, and what the api keeps for it beside
/// them. One map entry per job holds all of it; the ordered indexes point at
/// the entry's map node (whose key is the job's only copy of its id there),
/// so a job costs one allocation and no copy of its id per index.
struct job_entry : bus::job_info {
  job_entry() = default;
  explicit job_entry(bus::job_info&& info) : bus::job_info(std::move(info)) {}
  /// Replaces the job's fields; the api's own (below) stay.
  job_entry& operator=(const bus::job_info& info) {
    static_cast<bus::job_info&>(*this) = info;
    return *this;
  }
  std::uint64_t seq = 0;        ///< its submission seq
  std::uint64_t last_event = 0; ///< its last committed event seq
  /// Its place in the serving order while it is not terminal.
  std::optional<order_key_t> order;
  /// Its position among its level's queued jobs, while positions_valid.
  std::uint64_t listed_position = 0;
  /// after[0, deps_met) have succeeded or left the history: the end of a
  /// dependency looks on from there (a job after an array of 10,000 tasks
  /// would otherwise look over every task ended so far at each task's end).
  std::size_t deps_met = 0;
};

/// An idempotent operation carried out (SPEC section 9), as the api keeps it
/// for its window: what a retry is checked against. Its reply stays in the
/// store and is read back on a replay (replay_atom): 10,000 cancels kept
/// 9.5 MB of replies in memory for a day. Memory holds a reply only where a
/// caller answers from it at once (a forgotten job's replay record, kind
/// "submit", ADR 0073) or the store has none (a success that changed
/// nothing, keep_operation in operations.cpp).
struct op_record {
  std::string kind;   ///< the op
  std::string digest; ///< of the arguments, without the operation id
  std::string result; ///< the reply, where memory holds it (above); else ""
  std::int64_t at_ms = 0;
  /// A stored row, as a start loads it (only kind "submit" with its result).
  static op_record of(const operation_row& row) {
    return {row.kind, row.digest, row.result, row.at_ms};
  }
};

/// A job's node in the read model (its id and its entry): what the ordered
/// indexes point at.
using job_node = std::pair<const std::string, job_entry>;

struct api_state {
  context_ptr ctx;
  std::unordered_map<std::string, identity> tokens;    ///< token hash -> identity
  std::unordered_map<std::string, invite_row> invites; ///< code hash -> unused invite
  /// The read model of every job. Its nodes do not move (an unordered_map's
  /// never do), so the indexes below hold pointers to its nodes or their
  /// keys: a job leaves every index before it leaves this map (history.cpp).
  std::unordered_map<std::string, job_entry> jobs;
  id_index ids; ///< every job's id, sorted when asked: prefix lookups
  /// The longest unique id prefix of any job (unique_prefix_of); 0: not known
  /// since ids last changed.
  std::size_t ids_prefix = 0;
  name_index<job_node> names;                ///< named jobs by name, built when asked
  array_index<job_node> arrays;              ///< array tasks by array id and name, when asked
  std::map<std::uint64_t, job_node*> by_seq; ///< jobs in submission order
  std::unordered_map<std::string, std::vector<bus::allocation_info>> allocs; ///< by job
  /// Job actors of non-terminal jobs that have one: a queued job has none
  /// until it is placed or acted on (actor_of, parked.cpp).
  std::unordered_map<std::string, job_actor> live;
  std::map<std::string, node_entry> nodes;                ///< by name
  std::unordered_map<std::string, std::string> peer_node; ///< connection -> node name
  std::uint64_t next_seq = 1;                             ///< seq of the next submitted job
  /// Serving order of every non-terminal job: (level, rank, seq) -> job. The
  /// api owns priority and rank (job actors hear of committed moves); running
  /// jobs keep their place for a requeue, positions count queued jobs only.
  std::map<order_key_t, job_node*> order;
  std::array<std::int64_t, 3> max_rank{};        ///< per level
  std::array<std::uint64_t, 3> queued_count{};   ///< queued jobs per level
  std::array<std::uint64_t, 3> queued_pending{}; ///< per level: submitted jobs not yet committed
  /// Whether queued jobs' listed_position is current: computed for a listing
  /// (a paged one counts once), kept until the serving order or a state changes.
  bool positions_valid = false;
  std::unordered_map<std::string, std::vector<std::string>> dependents; ///< job -> jobs after it
  std::map<std::string, profile_row> profiles;                          ///< by key
  std::map<std::uint64_t, event_waiter> waiters; ///< by id: events readers held until news
  std::uint64_t next_waiter = 1;
  bool board_scheduled = false; ///< a board_atom is on its way
  /// The latest jobs to end, newest last (at most recent_finished_max): the
  /// snapshot's "recent" list. A job forgotten meanwhile is skipped there.
  std::deque<std::string> recent_finished;
  std::uint64_t event_news = 0;
  /// Idempotent operations carried out (SPEC section 9), by operation id.
  std::unordered_map<std::string, op_record> operations;
  std::set<std::string> ops_in_flight; ///< operation ids being carried out now
  bool expiry_scheduled = false;       ///< an expire_atom is on its way
  bool history_scheduled = false;      ///< an (expire_atom, true) is on its way
  bool history_capping = false;        ///< a pass of [retention] history_jobs is committing
  std::uint64_t cap_passes = 0;        ///< passes of history_jobs so far (history.cpp)
  /// Every finished job held, by (end, seq): history_jobs' passes (history.cpp).
  std::set<std::pair<std::int64_t, std::uint64_t>> ended_order;
  /// The digest of each spec submitted with a client job id, for its replay
  /// (ADR 0073), by the job's id in `jobs` (its map node's key): 32 bytes
  /// and a pointer, where a map of hex strings by id took about 220 bytes a
  /// job (cq submit gives every job an id). A job leaves it as it leaves `jobs`.
  std::unordered_map<const std::string*, digest_bytes> spec_digest;
  std::set<std::string> submits_in_flight;                 ///< client job ids being committed
  std::unordered_map<std::string, auth_limit> auth_limits; ///< by peer
  /// Each node's diagnostic grant (its active one, else its latest), and their actors.
  std::map<std::string, bus::grant_info> grants;
  std::map<std::string, grant_actor> grant_actors;

  static inline const char* name = "cq.api";
};

using policy::default_name;
using policy::has_nul;
using policy::rank_step;
using policy::valid_name;
using policy::validate_spec;

inline std::uint8_t level_index(const std::string& p) {
  auto l = policy::parse_level(p);
  return static_cast<std::uint8_t>(l ? *l : policy::level::medium);
}

/// The hex form of job `node`'s spec digest ("" = none), as job rows and
/// submits carry it.
inline std::string spec_digest_of(const api_state& st, const job_node& node) {
  auto d = st.spec_digest.find(&node.first);
  return d == st.spec_digest.end() ? std::string() : digest_hex(d->second);
}
/// Keeps `hex` as job `node`'s spec digest (nothing for "", or for text that
/// is not a digest's).
inline void keep_spec_digest(api_state& st, const job_node& node, std::string_view hex) {
  if (auto d = hex.empty() ? std::nullopt : digest_from_hex(hex))
    st.spec_digest[&node.first] = *d;
}

/// Records job `node` at (level, rank, seq) in the serving order, or removes
/// it once terminal.
inline void place_in_order(api_state& st, job_node& node, std::uint8_t level, std::int64_t rank,
                           std::uint64_t seq, bool terminal) {
  st.positions_valid = false;
  auto& e = node.second;
  if (e.order) {
    st.order.erase(*e.order);
    e.order.reset();
  }
  if (terminal)
    return;
  order_key_t k{level, rank, seq};
  st.order[k] = &node;
  e.order = k;
  auto& m = st.max_rank[level];
  m = std::max(m, rank);
}

/// The same for job `id`, if the read model has it.
inline void place_in_order(api_state& st, const std::string& id, std::uint8_t level,
                           std::int64_t rank, std::uint64_t seq, bool terminal) {
  if (auto j = st.jobs.find(id); j != st.jobs.end())
    place_in_order(st, *j, level, rank, seq, terminal);
}

/// Counts queued jobs per level (for the position of a new job).
inline void count_queued(api_state& st, std::optional<job_state> before, job_state after,
                         std::uint8_t level_before, std::uint8_t level_after) {
  if (before != after || level_before != level_after)
    st.positions_valid = false;
  if (before == job_state::queued)
    --st.queued_count[level_before];
  if (after == job_state::queued)
    ++st.queued_count[level_after];
}

/// Splits `after` into dependencies still pending (registering the job as their
/// dependent, with `enrol`) and the first one that ended without success.
/// Called where the job is registered (submit, recovery), so no outcome can
/// slip in between; again without `enrol` when its actor is spawned later.
inline std::pair<std::set<std::string>, failed_dependency>
classify_deps(api_state& st, const bus::job_info& j, bool enrol = true) {
  std::set<std::string> waiting;
  failed_dependency failed;
  for (auto& d : j.after) {
    // A dependency no longer known ended before the history window (a submit
    // names only known jobs): had it not succeeded, this job would have
    // failed with it then.
    auto it = st.jobs.find(d);
    auto ds = it != st.jobs.end() ? it->second.state : job_state::succeeded;
    if (ds == job_state::succeeded)
      continue;
    if (is_terminal(ds)) {
      if (failed.empty())
        failed = {d, ds};
    } else {
      waiting.insert(d);
      if (enrol)
        st.dependents[d].push_back(j.id);
    }
  }
  return {std::move(waiting), std::move(failed)};
}

/// How many ended jobs the snapshot lists.
constexpr std::size_t recent_finished_max = 20;

/// Job `id` just ended: the newest of the snapshot's recent list.
inline void note_finished(api_state& st, const std::string& id) {
  st.recent_finished.push_back(id);
  while (st.recent_finished.size() > recent_finished_max)
    st.recent_finished.pop_front();
}

/// Job `id` committed event `seq` (a job no longer in memory is skipped).
inline void note_event(api_state& st, const std::string& id, std::uint64_t seq) {
  if (auto j = st.jobs.find(id); j != st.jobs.end())
    j->second.last_event = std::max(j->second.last_event, seq);
}

inline bool is_queued(const api_state& st, const std::string& id) {
  auto j = st.jobs.find(id);
  return j != st.jobs.end() && j->second.state == job_state::queued;
}

/// The first `n` queued jobs in serving order that wait for nothing a person
/// or a dependency holds: those the scheduler is asked to explain (a
/// listing's reasons, the board's "waiting" lines).
inline std::vector<std::string> explainable_queued(const api_state& st, std::size_t n) {
  std::vector<std::string> ids;
  for (auto& [key, node] : st.order) {
    if (ids.size() >= n)
      break;
    auto& j = node->second;
    if (j.state != job_state::queued || j.on_hold)
      continue;
    if (std::any_of(j.after.begin(), j.after.end(), [&](auto& d) {
          auto dj = st.jobs.find(d);
          return dj != st.jobs.end() && dj->second.state != job_state::succeeded;
        }))
      continue;
    ids.push_back(node->first);
  }
  return ids;
}

/// 1-based position of `id` among the queued jobs of its level; 0 when it is
/// not queued (positions are for queued jobs).
inline std::uint64_t position_of(const api_state& st, const std::string& id) {
  auto j = st.jobs.find(id);
  if (j == st.jobs.end() || !j->second.order || j->second.state != job_state::queued)
    return 0;
  if (st.positions_valid) // counted for a listing, nothing moved since
    return j->second.listed_position;
  auto level = std::get<0>(*j->second.order);
  std::uint64_t pos = 0;
  for (auto it = st.order.lower_bound(order_key_t{level, INT64_MIN, 0});
       it != st.order.end() && std::get<0>(it->first) == level; ++it) {
    if (it->second->second.state != job_state::queued)
      continue;
    ++pos;
    if (it->second == &*j)
      return pos;
  }
  return 0;
}

using api_ptr = api_actor::stateful_pointer<api_state>;

inline bus::error_info err(errc c, std::string m) {
  return {c, std::move(m)};
}

/// What `cq profile ls` shows of a profile, and what a submit sized by it says.
bus::profile_info profile_info_of(const profile_row& p);

/// The shortest id prefix the CLI shows and a reference may use.
constexpr std::size_t min_id_prefix = 4;

/// How many leading characters of `id` (a job's or an array's) tell it apart
/// from every job's id: one more than its longest common prefix with its
/// neighbours in sorted order.
inline std::size_t unique_prefix_of(const api_state& st, const std::string& id) {
  auto common = [&](const std::string& other) {
    std::size_t n = 0;
    while (n < id.size() && n < other.size() && id[n] == other[n])
      ++n;
    return n;
  };
  std::size_t longest = 0;
  auto& ids = st.ids.sorted();
  auto it = std::lower_bound(ids.begin(), ids.end(), id, by_id{});
  auto next = it != ids.end() && **it == id ? std::next(it) : it;
  if (next != ids.end())
    longest = std::max(longest, common(**next));
  if (it != ids.begin())
    longest = std::max(longest, common(**std::prev(it)));
  return std::min(id.size(), longest + 1);
}

/// The id prefix a page shows: the longest unique prefix among its ids (at
/// least 8). `each` calls its argument with each id on the page and whether
/// it is an array's. A large page takes the longest of every job's instead,
/// found in one walk over the sorted ids and kept until they change (as long
/// or longer, so still one a person can type back), and looks up only its
/// arrays' ids: a lookup per row costs more than the walk.
template <class Each>
std::size_t page_prefix(api_state& st, std::size_t rows, Each each) {
  constexpr std::size_t at_least = 8, large_page = 256;
  std::size_t prefix = at_least;
  if (rows <= large_page) {
    each([&](const std::string& id, bool) { prefix = std::max(prefix, unique_prefix_of(st, id)); });
    return prefix;
  }
  if (st.ids_prefix == 0) {
    std::size_t longest = 0;
    const std::string* prev = nullptr;
    for (const auto* id : st.ids.sorted()) {
      if (prev) {
        auto [a, b] = std::mismatch(prev->begin(), prev->end(), id->begin(), id->end());
        longest = std::max(longest, static_cast<std::size_t>(a - prev->begin()));
      }
      prev = id;
    }
    st.ids_prefix = longest + 1;
  }
  prefix = std::max(prefix, st.ids_prefix);
  each([&](const std::string& id, bool array) {
    if (array)
      prefix = std::max(prefix, unique_prefix_of(st, id));
  });
  return prefix;
}

/// The array `ref` names among the read model's jobs (bus::array_named: its
/// id, a prefix of it or its name); "" when none, an error when several.
bus::result<std::string> array_named(api_state& st, const std::string& ref);

/// How long and how many finished jobs are kept, for "no job" (history.cpp).
std::string history_hint(const context& ctx);

/// Resolves what a person typed for a job: a full id, a unique id prefix of
/// at least `min_id_prefix` characters, or a job's name (unique, the one live
/// job of that name, or the newest when none of them is live). Several
/// matches list the candidates (api.cpp).
std::variant<std::string, bus::error_info> resolve_job(api_state& st, const std::string& ref);

inline bus::node_info node_view(api_ptr self, const node_entry& n) {
  auto info = n.info;
  info.name = n.row.name;
  info.state = n.row.state;
  info.enabled = n.row.enabled;
  info.disabled_reason = n.row.disabled_reason;
  info.online =
      policy::heartbeat_fresh(info.last_heartbeat_ms, self->state.ctx->cfg.heartbeat_fresh_ms,
                              now_ms(self, *self->state.ctx));
  return info;
}

template <class OnOk>
void commit_then(api_ptr self, std::shared_ptr<const change_batch> batch,
                 caf::typed_response_promise<api_reply> rp, OnOk on_ok) {
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value, std::move(batch))
      .then(
          [=](const commit_result& r) mutable {
            if (!r.error.empty())
              rp.deliver(api_reply{err(errc::internal, "store: " + r.error)});
            else
              rp.deliver(on_ok());
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(errc::internal, "store unavailable: " + to_string(e))});
          });
}

template <class OnOk>
void commit_then(api_ptr self, change_batch batch, caf::typed_response_promise<api_reply> rp,
                 OnOk on_ok) {
  commit_then(self, std::make_shared<const change_batch>(std::move(batch)), rp, std::move(on_ok));
}

/// An expiry's deletion (`batch`), committed in the background: `on_ok` once
/// it is durable; on failure a warning that `what` was not removed, and
/// `retry` (which tries again later; the store's damage is loud elsewhere).
template <class OnOk, class Retry>
void commit_expiry(api_ptr self, change_batch batch, const char* what, OnOk on_ok, Retry retry) {
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .then([=](const commit_result& r) mutable {
        if (!r.error.empty()) {
          spdlog::warn("{} not removed: {}", what, r.error);
          retry();
          return;
        }
        on_ok();
      });
}

/// Remembers that connection `peer` authenticated as node `n`, so that answers
/// to orders from it reach the node actor (which checks the order went there).
inline void note_peer(api_state& st, node_entry& n, const std::string& peer) {
  if (std::find(n.peers.begin(), n.peers.end(), peer) != n.peers.end())
    return;
  n.peers.push_back(peer);
  st.peer_node[peer] = n.row.name;
  if (n.peers.size() > peers_per_node) {
    st.peer_node.erase(n.peers.front());
    n.peers.erase(n.peers.begin());
  }
}

/// The audit row of an allowed mutating call by `who`, committed with its
/// effect (refusals are audited by the dispatcher, api.cpp).
inline audit_row audit_of(std::int64_t now, const identity& who, const api_request& req,
                          std::string op, std::string target, std::string outcome) {
  return audit_row{now,           who.name,          std::string(to_string(who.who)),
                   std::move(op), std::move(target), std::move(outcome),
                   req.args};
}

/// The operation id of a request that has one (SPEC section 9), or "".
inline std::string operation_id_of(const api_request& req) {
  return std::visit(
      [](auto& b) -> std::string {
        if constexpr (requires { b.operation_id; })
          return b.operation_id.value_or("");
        else
          return {};
      },
      req.body);
}

/// Adds the stored result of `req`'s operation id, if it has one, to the
/// batch that carries its effect.
template <class Rep>
void add_operation(change_batch& batch, std::int64_t now, const api_request& req,
                   std::string_view kind, const Rep& rep) {
  auto id = operation_id_of(req);
  if (!id.empty())
    batch.push_back(operation_row{id, std::string(kind), req.args, bus::encode_body(rep), now});
}

/// Carries an order to a node and, once the node confirms, commits the audit
/// row (and the operation's result) and replies with the node's current view.
template <class Order>
caf::result<api_reply> order_then_audit(api_ptr self, const identity& who, const api_request& req,
                                        node_actor node, Order order, std::string op,
                                        std::string target) {
  auto rp = self->make_response_promise<api_reply>();
  // The node actor answers every order within its own deadline (order_timeout).
  self->request(node, caf::infinite, std::move(order))
      .then(
          [=](const order_reply& r) mutable {
            if (!r.ok) {
              rp.deliver(api_reply{r.error});
              return;
            }
            auto& st = self->state;
            auto now = now_ms(self, *st.ctx);
            auto name = target.substr(0, target.find('/'));
            bus::node_rep rep;
            if (auto n = st.nodes.find(name); n != st.nodes.end())
              rep.node = node_view(self, n->second);
            change_batch batch{audit_of(now, who, req, op, target, "ok")};
            add_operation(batch, now, req, op, rep);
            commit_then(self, std::move(batch), rp, [=] { return api_reply{rep}; });
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{
                err(errc::unavailable, fmt::format("node did not answer: {}", to_string(e)))});
          });
  return rp;
}

/// The actor of live job `id`, spawned now if the job has none (a queued job
/// waits without one until it is placed or acted on); null when the job is
/// unknown or ended (parked.cpp).
job_actor actor_of(api_ptr self, const std::string& id);
/// Puts queued job `id`, which has no actor, in the scheduler's queue when it
/// may start (not held, every dependency succeeded); else nothing. With
/// `batch`, the entry is added there for one message of many (recovery);
/// with `rekey`, as rekey_parked.
void enqueue_parked(api_ptr self, const std::string& id, std::vector<queue_entry>* batch = nullptr,
                    bool rekey = false);
/// `cq move` of queued job `id` without an actor: its new place in the
/// scheduler's queue, kept only if it is still queued there (parked.cpp,
/// invariant 4).
void rekey_parked(api_ptr self, const std::string& id);
/// Registers a job committed as queued (submit, recovery): it waits without
/// an actor, unless a dependency already failed (its actor fails it now).
void park(api_ptr self, const std::string& id, std::vector<queue_entry>* batch = nullptr);
/// The same for job `id` whose read-model entry `e` is at hand (recovery).
void park(api_ptr self, const std::string& id, job_entry& e, std::vector<queue_entry>* batch);

/// The rows listing's page (ls_req::rows), its filters read (listing.cpp).
bus::ls_rep ls_rows(api_ptr self, const bus::ls_req& q, const bus::listing_filter& filter);

/// A move (jobs.cpp).
caf::result<api_reply> handle_move(api_ptr self, const identity& who, const api_request& req,
                                   const bus::move_req& m);

/// Rebuilds the read model from the store's snapshot and spawns the job and
/// node actors (recovery.cpp).
void recover(api_ptr self, std::shared_ptr<snapshot> snap);

// One handler per request type: jobs.cpp (submit, ls, show, cancel, move,
// profiles, logs) and nodes.cpp (holds, faults, invites, joins, approvals,
// node listings, heartbeats, reports).
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::submit_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::ls_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::show_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::cancel_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::move_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::release_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_clear_fault_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::profile_ls_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::profile_rm_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::logs_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_invite_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_join_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_approve_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_ls_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::heartbeat_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::report_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::preempt_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::events_req& body);

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_enable_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_disable_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::token_add_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::token_ls_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::whoami_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::job_hold_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::terminal_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::token_revoke_req& body);
/// history.cpp: cq clean.
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::clean_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::audit_req& body);

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_diagnostic_req& body);
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_diagnostic_show_req& body);

/// Readers waiting for `job`'s events (or every job's) read again (events.cpp).
void wake_readers(api_ptr self, const std::string& job);
/// Records hold `h` of node `node` appearing (held) or gone (released) as an
/// event of the job whose allocation it holds, once per hold (events.cpp).
void record_hold(api_ptr self, const std::string& node, const bus::hold_info& h, bool held);

/// Asks the scheduler why each of `ids` waits and calls `done` once with the
/// answers in the order of `ids`, or with nullopt when it could not say
/// (jobs.cpp: a listing's reasons; board.cpp: the board's waiting lines).
void explain_queued(api_ptr self, std::vector<std::string> ids,
                    std::function<void(std::optional<std::vector<bus::job_reasons>>)> done);

/// Marks the board stale: a rewrite follows within board_interval (board.cpp).
void mark_board(api_ptr self);
/// Keeps operation `op_id`'s record once carried out with reply `r`, then
/// delivers `r` (operations.cpp).
void keep_operation(api_ptr self, std::string op_id, std::string kind, std::string digest,
                    api_reply r, caf::typed_response_promise<api_reply> rp);
/// Arms one expire_atom for when the oldest stored operation id has passed
/// its window (config::operation_window_ms); nothing when none is stored.
void schedule_expiry(api_ptr self);
/// Forgets (in the store, then in memory) the operation ids past their window.
void expire_operations(api_ptr self);
/// The board's JSON (board.cpp).
std::string board_json(api_ptr self, const std::map<std::string, bus::string_list>& why);
/// The board_atom: the scheduler's reasons for the first queued jobs, then
/// the snapshot to context::write_board.
void write_board(api_ptr self);

/// Reads the store for waiter `id` and answers it if there are events (or,
/// `last`, in any case); an event committed during the read reads again.
void poll_waiter(api_ptr self, std::uint64_t id, bool last);

} // namespace cq::coord::api_impl
