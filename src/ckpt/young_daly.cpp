#include "ckpt/young_daly.h"

#include <cmath>

namespace ratchet {

double young_daly_interval_seconds(double save_s, double mtbf_s) {
  return std::sqrt(2.0 * save_s * mtbf_s);
}

}  // namespace ratchet
