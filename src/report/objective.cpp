#include "report/objective.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace ratchet {

std::optional<bool> implied_maximize(const std::string& metric) {
  const auto slash = metric.rfind('/');
  const std::string last = slash == std::string::npos ? metric : metric.substr(slash + 1);
  if (last == "acc" || last == "acc_norm" || last == "acc_token_mean") return true;
  if (last == "val_loss" || last == "loss" || last == "ppl") return false;
  return std::nullopt;
}

void check_metric_name(const std::string& what, const std::string& m) {
  if (m.empty() || m.size() > 200)
    fail(what, ": metric name '", m.substr(0, 60), m.size() > 60 ? "..." : "",
         "' must be 1 to 200 characters (e.g. val_loss, hellaswag/acc_norm, data/books/loss)");
  for (unsigned char c : m)
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '/'))
      fail(what, ": metric name '", m, "' holds a character other than letters, digits and _ . - / "
           "(names look like val_loss, hellaswag/acc_norm, data/books/loss)");
  size_t at = 0;
  while (at <= m.size()) {
    const size_t end = std::min(m.find('/', at), m.size());
    const std::string part = m.substr(at, end - at);
    if (part.empty() || part == "." || part == "..")
      fail(what, ": metric name '", m, "' has an empty, '.' or '..' component");
    at = end + 1;
  }
}

Objective make_objective(const std::string& metric, const std::string& direction,
                         const std::string& metric_what, const std::string& direction_what) {
  check_metric_name(metric_what, metric);
  Objective o;
  o.metric = metric;
  if (direction == "min" || direction == "max") {
    o.maximize = direction == "max";
    return o;
  }
  if (!direction.empty())
    fail(direction_what, " '", direction, "' must be min or max");
  const std::optional<bool> implied = implied_maximize(metric);
  if (!implied)
    fail(direction_what, " is needed for metric '", metric, "': its name implies no direction "
         "(losses and ppl go down, acc/acc_norm/acc_token_mean go up); give min or max");
  o.maximize = *implied;
  return o;
}

std::string list_metrics(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace ratchet
