// cq-coordinator-web.so's entry point (adapters/web.hpp): starts the status
// server and the notifier that the options ask for, behind one sink.
#include "adapters/notifier.hpp"
#include "adapters/status_server.hpp"
#include "adapters/web.hpp"

#include <stdexcept>

namespace cq::coord {
namespace {

class both : public web_sink {
public:
  std::unique_ptr<status_server> web;
  std::unique_ptr<notifier> notes;
  void publish(const std::string& snapshot) override {
    if (web)
      web->publish(snapshot);
    if (notes)
      notes->publish(snapshot);
  }
  std::string url() const override { return web ? web->url() : std::string(); }
};

} // namespace
} // namespace cq::coord

extern "C" __attribute__((visibility("default"))) cq::coord::web_sink*
cq_start_web(const cq::coord::web_options* o, std::string* error) {
  using namespace cq::coord;
  try {
    auto sink = std::make_unique<both>();
    if (!o->http.empty()) {
      status_options so{o->http, o->db_path, o->metrics, o->chart_interval};
      so.token_hash = o->calls.token_hash;
      sink->web = std::make_unique<status_server>(std::move(so));
    }
    if (!o->rules.empty())
      sink->notes = std::make_unique<notifier>(
          notifier_options{o->db_path, o->cursor_path, o->rules, o->metrics, o->calls.read_job});
    return sink.release();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}
