#include "cq/json.hpp"

#include <charconv>

namespace cq {

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace json_detail {

void append_string(std::string& out, std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      out += dump_json(nlohmann::ordered_json(std::string(s)));
      return;
    }
  out += '"';
  out += s;
  out += '"';
}

namespace {
template <class N>
void append_integer(std::string& out, N v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
} // namespace

void append_number(std::string& out, std::uint64_t v) {
  append_integer(out, v);
}

void append_number(std::string& out, std::int64_t v) {
  append_integer(out, v);
}

} // namespace json_detail

} // namespace cq
