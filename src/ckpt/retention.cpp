#include "ckpt/retention.h"

#include <algorithm>

namespace ratchet {

std::vector<std::string> retention_victims(const std::vector<RetentionCandidate>& all,
                                           const RetentionPolicy& keep, int64_t anchor_step) {
  const RetentionCandidate* anchor = nullptr;
  for (const auto& c : all)
    if (c.valid && (anchor_step < 0 ? (!anchor || c.step > anchor->step) : c.step == anchor_step))
      anchor = &c;
  if (!anchor) return {};  // nothing known to be good: delete nothing

  // The anchor's run, at or before the anchor, newest first.
  std::vector<const RetentionCandidate*> run;
  for (const auto& c : all)
    if (c.valid && c.identity == anchor->identity && c.step <= anchor->step) run.push_back(&c);
  std::sort(run.begin(), run.end(), [](auto* a, auto* b) { return a->step > b->step; });

  std::vector<std::string> victims;
  const size_t keep_last = (size_t)std::max(1, keep.keep_last);
  for (size_t i = 0; i < run.size(); i++) {
    const auto& c = *run[i];
    const bool recent = i < keep_last;  // run[0] is the anchor
    const bool every = keep.keep_every > 0 && c.step % keep.keep_every == 0;
    const bool best = c.step == keep.best_step;
    if (!recent && !every && !best) victims.push_back(c.path);
  }
  for (const auto& c : all)
    if (!c.committed && c.step < anchor->step) victims.push_back(c.path);
  return victims;
}

}  // namespace ratchet
