// How often to checkpoint: Young's (1974) first-order optimum, refined by Daly
// (2006). With a save taking `save_s` and preemptions arriving every `mtbf_s`
// on average, the interval between saves that minimises the expected time lost
// (saves plus work redone after a preemption) is sqrt(2 · save · MTBF).
// `ratchet train --ckpt-every auto` and `ratchet plan` both use this one.
#pragma once

namespace ratchet {

double young_daly_interval_seconds(double save_s, double mtbf_s);

}  // namespace ratchet
