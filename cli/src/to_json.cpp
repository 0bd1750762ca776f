#include "cq/cli/to_json.hpp"

namespace cq::cli {

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

} // namespace cq::cli
