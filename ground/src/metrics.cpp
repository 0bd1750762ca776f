#include "cq/metrics.hpp"

#include <fmt/format.h>

#include <cmath>

namespace cq::metrics {

void registry::counter(const std::string& name, std::string help) {
  std::lock_guard g(m_);
  auto& f = families_[name];
  f.help = std::move(help);
  f.is_histogram = false;
}

void registry::histogram(const std::string& name, std::string help, std::vector<double> bounds) {
  std::lock_guard g(m_);
  auto& f = families_[name];
  f.help = std::move(help);
  f.is_histogram = true;
  f.bounds = std::move(bounds);
}

void registry::add(const std::string& name, const labels& l, double by) {
  std::lock_guard g(m_);
  auto f = families_.find(name);
  if (f != families_.end() && !f->second.is_histogram)
    f->second.counters[l] += by;
}

void registry::observe(const std::string& name, double value, const labels& l) {
  std::lock_guard g(m_);
  auto f = families_.find(name);
  if (f == families_.end() || !f->second.is_histogram)
    return;
  auto& h = f->second.histograms[l];
  h.counts.resize(f->second.bounds.size());
  for (std::size_t i = 0; i < f->second.bounds.size(); ++i)
    if (value <= f->second.bounds[i]) {
      ++h.counts[i];
      break;
    }
  h.sum += value;
  ++h.count;
}

double registry::value(const std::string& name, const labels& l) const {
  std::lock_guard g(m_);
  auto f = families_.find(name);
  if (f == families_.end())
    return 0;
  auto c = f->second.counters.find(l);
  return c == f->second.counters.end() ? 0 : c->second;
}

std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_labels(const labels& l) {
  if (l.empty())
    return {};
  std::string out = "{";
  for (std::size_t i = 0; i < l.size(); ++i)
    out += fmt::format("{}{}=\"{}\"", i ? "," : "", l[i].first, escape_label(l[i].second));
  return out + "}";
}

std::string format_value(double v) {
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);
}

std::string registry::render() const {
  std::lock_guard g(m_);
  std::string out;
  for (auto& [name, f] : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name,
                       f.is_histogram ? "histogram" : "counter");
    if (!f.is_histogram) {
      if (f.counters.empty())
        out += fmt::format("{} 0\n", name);
      for (auto& [l, v] : f.counters)
        out += fmt::format("{}{} {}\n", name, format_labels(l), format_value(v));
      continue;
    }
    auto write = [&](const labels& l, const histo* h) {
      std::uint64_t cum = 0;
      for (std::size_t i = 0; i < f.bounds.size(); ++i) {
        cum += h ? h->counts[i] : 0;
        auto bl = l;
        bl.emplace_back("le", format_value(f.bounds[i]));
        out += fmt::format("{}_bucket{} {}\n", name, format_labels(bl), cum);
      }
      auto bl = l;
      bl.emplace_back("le", "+Inf");
      out += fmt::format("{}_bucket{} {}\n", name, format_labels(bl), h ? h->count : 0);
      out += fmt::format("{}_sum{} {}\n", name, format_labels(l), format_value(h ? h->sum : 0));
      out += fmt::format("{}_count{} {}\n", name, format_labels(l), h ? h->count : 0);
    };
    if (f.histograms.empty())
      write({}, nullptr);
    for (auto& [l, h] : f.histograms)
      write(l, &h);
  }
  return out;
}

} // namespace cq::metrics
