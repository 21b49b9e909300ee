#include "sweep/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "sweep/budget.h"
#include "sweep/controller.h"
#include "sweep/executor.h"
#include "train/ledger.h"

namespace ratchet::sweep {

namespace {

const char* status_name(TrialState::Status s) {
  switch (s) {
    case TrialState::kPending: return "pending";
    case TrialState::kRunning: return "running";
    case TrialState::kPaused: return "paused";
    case TrialState::kDone: return "done";
    case TrialState::kFailed: return "failed";
    case TrialState::kStopped: return "stopped";
  }
  return "?";
}

double latest_loss(const Trial& t, int* rung) {
  for (int k = (int)t.loss.size() - 1; k >= 0; k--)
    if (std::isfinite(t.loss[k])) {
      if (rung) *rung = k;
      return t.loss[k];
    }
  if (rung) *rung = -1;
  return NAN;
}

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A gnuplot single-quoted string: '' stands for one quote (a directory or a
// choice value with a quote in it broke the script).
std::string gq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

int max_steps(const SweepState& s) {
  const auto r = s.rungs();
  return r.empty() ? s.init.value("base_steps", 0) : r.back();
}

}  // namespace

Spend sweep_spend(const SweepState& s) {
  Spend sp;
  const double R = max_steps(s);
  const CostModel m = fit_cost_model(s);
  for (const auto& t : s.trials) {
    const Ledger l = trial_ledger(t);
    sp.device_hours += l.device_hours();
    sp.cost += l.cost;
    if (m.trials == 0) continue;
    // Each trial at its own speed (configurations differ: model size, batch):
    // the model's cost for R steps in one segment, times how far the trial's
    // own spend was from the model's for what it ran.
    const auto own = Ledger::read_json(t.dir + "/ledger.json");
    double ratio = 1;
    if (own && own->max_step > 0) {
      const double modelled = m.fixed_s * (own->resumes + 1) + m.step_s * (own->max_step + own->steps_lost);
      if (modelled > 0) ratio = own->device_seconds / modelled;
    }
    sp.all_to_R_device_hours += ratio * m.segment_hours(R);
  }
  if (m.trials > 0)
    sp.method = "every trial straight to " + std::to_string((long)R) + " steps in one segment at " +
                m.describe() + ", each trial scaled by its own measured speed";
  return sp;
}

std::string status_table(const SweepState& s) {
  std::ostringstream o;
  const auto rungs = s.rungs();
  o << "sweep " << s.dir << " (" << s.init.value("sweep_id", std::string()) << "): "
    << s.trials.size() << " trials";
  if (!s.settings.is_null())
    o << ", " << s.settings.at("scheduler").get<std::string>() << ", rungs "
      << s.settings.at("rungs").dump();
  o << (s.done ? ", ended: " + s.done_reason : s.budget_reached ? ", budget reached: " + s.budget_reason : "")
    << "\n";
  const std::string& metric = s.objective.metric;
  if (metric != "val_loss") o << "objective: " << metric << " (" << s.objective.direction() << ")\n";
  // the objective's column: the metric's name, cut to the column's width
  const std::string head = metric == "val_loss" ? "val loss" : metric.size() > 14 ? "..." + metric.substr(metric.size() - 11) : metric;
  char line[512];
  std::snprintf(line, sizeof line, "%-6s %-44s %5s %14s %7s %12s %10s  %s\n", "trial",
                "hyperparameters", "rung", head.c_str(), "steps", "device-h", "cost", "state");
  o << line;
  for (const auto& t : s.trials) {
    const Ledger l = trial_ledger(t);
    int k = -1;
    const double vl = latest_loss(t, &k);
    std::string hp = describe(t.config);
    if (hp.size() > 44) hp = hp.substr(0, 41) + "...";
    std::string state = status_name(t.status);
    if (t.status == TrialState::kRunning && !rungs.empty() && t.rung >= 0)
      state += " to " + std::to_string(rungs[t.rung]);
    std::snprintf(line, sizeof line, "%-6d %-44s %5s %14s %7.0f %12.6f %10.4f  %s\n", t.id,
                  hp.c_str(), k >= 0 ? std::to_string(k).c_str() : "-", fmt("%.4f", vl).c_str(),
                  l.max_step, l.device_hours(), l.cost, state.c_str());
    o << line;
  }
  const Spend sp = sweep_spend(s);
  std::snprintf(line, sizeof line, "spend: %.6f device-hours, cost %.4f\n", sp.device_hours, sp.cost);
  o << line;
  double bl = 0;
  int bk = -1;
  const int b = best_trial(s, &bl, &bk);
  if (b >= 0 && !rungs.empty())
    o << "best: trial " << b << ", " << (metric == "val_loss" ? "val loss" : metric) << " "
      << fmt("%.4f", bl) << " at " << rungs[bk]
      << " steps (" << describe(s.trials[b].config) << ")\n";
  return o.str();
}

nlohmann::json summary_json(const SweepState& s) {
  nlohmann::json j;
  const auto rungs = s.rungs();
  const Spend sp = sweep_spend(s);
  j["sweep_id"] = s.init.value("sweep_id", std::string());
  j["dir"] = s.dir;
  j["scheduler"] = s.settings.is_null() ? nlohmann::json() : s.settings.at("scheduler");
  j["rungs"] = rungs;
  j["device_hours"] = sp.device_hours;
  j["cost"] = sp.cost;
  j["all_to_max_steps_device_hours_estimate"] = sp.all_to_R_device_hours;
  j["saved_device_hours_estimate"] = sp.all_to_R_device_hours - sp.device_hours;
  j["saved_estimate_method"] = sp.method;
  // Against every trial to R only when the sweep ran its course: a sweep cut
  // short by a budget (or still running) saved nothing it can claim.
  int open = 0;
  for (const auto& t : s.trials)
    open += t.status == TrialState::kPending || t.status == TrialState::kRunning ||
            t.status == TrialState::kStopped || t.relaunch;
  j["saved_comparable"] = s.done && !s.budget_reached && open == 0;
  j["done"] = s.done;
  j["end_reason"] = s.done_reason;
  j["budget_reached"] = s.budget_reached;
  double bl = NAN;
  int bk = -1;
  const int b = best_trial(s, &bl, &bk);
  // The objective's values under their own keys; val_loss keys as before
  // objectives (null when the objective is another metric).
  const bool by_val = s.objective.metric == "val_loss";
  j["objective"] = s.objective.metric;
  j["direction"] = s.objective.direction();
  j["best_value"] = b >= 0 ? nlohmann::json(bl) : nlohmann::json();
  j["best_val_loss"] = b >= 0 && by_val ? nlohmann::json(bl) : nlohmann::json();
  if (b >= 0) {
    const Trial& t = s.trials[b];
    j["best_trial"] = {{"id", b}, {"config", t.config}, {"steps", rungs.empty() ? 0 : rungs[bk]},
                       {"value", bl}, {"val_loss", by_val ? nlohmann::json(bl) : nlohmann::json()},
                       {"run_dir", t.dir}, {"checkpoint", t.dir + "/ckpt"}};
    std::string cmd = "ratchet train";
    const int R = max_steps(s);
    for (const auto& a : trial_command(s, t, R, R)) cmd += " " + shell_quote(a);
    j["continue_command"] = cmd;
  } else {
    j["best_trial"] = nullptr;
  }
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : s.trials) {
    const Ledger l = trial_ledger(t);
    nlohmann::json losses = nlohmann::json::array();
    for (double v : t.loss) losses.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json());
    int k = -1;
    const double vl = latest_loss(t, &k);
    const nlohmann::json v = std::isfinite(vl) ? nlohmann::json(vl) : nlohmann::json();
    trials.push_back({{"id", t.id}, {"config", t.config}, {"state", status_name(t.status)},
                      {"rung", k}, {"steps", l.max_step}, {"value", v},
                      {"val_loss", by_val ? v : nlohmann::json()}, {"rung_values", losses},
                      {"rung_val_losses", by_val ? losses : nlohmann::json()},
                      {"device_hours", l.device_hours()},
                      {"cost", l.cost}, {"preemptions", l.preemptions}, {"note", t.note},
                      {"run_dir", t.dir}});
  }
  j["trials"] = trials;
  return j;
}

std::string summary_markdown(const SweepState& s, const nlohmann::json& j, bool plots) {
  std::ostringstream o;
  o << "# Sweep " << j.value("sweep_id", std::string()) << "\n\n";
  o << "- scheduler: " << (j["scheduler"].is_null() ? "(not run yet)" : j["scheduler"].get<std::string>())
    << ", rungs (steps): " << j["rungs"].dump() << "\n";
  const bool by_val_loss = s.objective.metric == "val_loss";
  o << "- objective: " << s.objective.metric << " (" << s.objective.direction()
    << (by_val_loss ? ", the default" : "") << ")\n";
  o << "- trials: " << s.trials.size() << "; spend " << fmt("%.6f", j["device_hours"].get<double>())
    << " device-hours, cost " << fmt("%.4f", j["cost"].get<double>()) << "\n";
  const double all = j["all_to_max_steps_device_hours_estimate"].get<double>();
  if (all > 0 && j["saved_comparable"].get<bool>())
    o << "- every trial to the last rung would have cost about " << fmt("%.6f", all)
      << " device-hours: saved " << fmt("%.6f", all - j["device_hours"].get<double>())
      << " (" << fmt("%.0f", 100 * (1 - j["device_hours"].get<double>() / all)) << "%). Estimated as "
      << j["saved_estimate_method"].get<std::string>() << "\n";
  else if (all > 0)
    o << "- no saving is claimed: the sweep " << (s.budget_reached ? "was stopped by a budget (" + s.budget_reason + ")"
                                                                    : std::string("has not ended"))
      << ", so it is not comparable with every trial run to the last rung\n";
  if (!j["best_trial"].is_null()) {
    o << "- best: trial " << j["best_trial"]["id"] << ", "
      << (by_val_loss ? std::string("val loss") : s.objective.metric) << " "
      << fmt("%.4f", j["best_value"].get<double>()) << " at " << j["best_trial"]["steps"]
      << " steps, " << describe(j["best_trial"]["config"].get<Config>()) << "\n";
    o << "- continue it to full length:\n\n```\n" << j["continue_command"].get<std::string>() << "\n```\n";
  }
  o << "\n```\n" << status_table(s) << "```\n\n"
    << (plots ? "![plots](sweep.png)\n" : "(no plots: `ratchet sweep report` ran without gnuplot or with --no-plot)\n");
  return o.str();
}

std::string plot_script(const SweepState& s, const std::string& png, const std::string& svg) {
  // Rung results in journal order, with the sweep's cumulative spend at that
  // moment (each result carries its trial's spend so far).
  std::vector<double> cum_at;
  {
    std::map<int, double> spent;
    for (const auto& e : s.results) {
      spent[e.at("trial").get<int>()] = e.value("device_hours", 0.0);
      double cum = 0;
      for (const auto& [id, h] : spent) cum += h;
      cum_at.push_back(cum);
    }
  }
  std::ostringstream bestd, pert;
  bestd << "$best << EOD\n";
  double best = NAN;
  std::map<int, std::vector<std::pair<double, double>>> by_trial;
  for (size_t i = 0; i < s.results.size(); i++) {
    const nlohmann::json& r = s.results[i];
    const double vl = (r.contains("value") ? r.at("value") : r.at("val_loss")).get<double>();
    if (!(best == best) || s.objective.better(vl, best)) best = vl;
    bestd << cum_at[i] << " " << best << "\n";
    by_trial[s.results[i].at("trial").get<int>()].push_back({cum_at[i], vl});
  }
  bestd << "EOD\n";
  // One line per trial (blank lines between trials).
  pert << "$pertrial << EOD\n";
  for (const auto& [id, pts] : by_trial) {
    for (const auto& [x, y] : pts) pert << x << " " << y << "\n";
    pert << "\n\n";
  }
  pert << "EOD\n";
  std::ostringstream g;
  g << bestd.str() << pert.str();
  const auto& params = s.init.at("space_params");
  const int P = (int)params.size();
  for (int i = 0; i < P; i++) {
    const std::string name = params[i].at("name").get<std::string>();
    const auto choices = params[i].value("choices", std::vector<std::string>{});
    g << "$hp" << i << " << EOD\n";
    for (const auto& t : s.trials) {
      int k = -1;
      const double vl = latest_loss(t, &k);
      if (!std::isfinite(vl)) continue;
      const std::string v = t.config.at(name);
      if (!choices.empty()) {
        size_t idx = 0;
        while (idx < choices.size() && choices[idx] != v) idx++;
        g << idx << " " << vl << " " << k << "\n";
      } else {
        g << v << " " << vl << " " << k << "\n";
      }
    }
    g << "EOD\n";
  }
  const int rows = 1 + (P + 1) / 2;
  auto panels = [&](std::ostringstream& o) {
    // device-hours are long numbers: slanted tics do not run into each other
    o << "set multiplot layout " << rows << ",2\nset grid\nset key off\nset format x '%.3g'\n"
         "set xtics rotate by -30\n";
    const std::string m = s.objective.metric == "val_loss" ? "val loss" : s.objective.metric;
    o << "set title " << gq(m + " of every trial vs cumulative sweep spend") << "\nset xlabel 'device-hours'\n"
      << "set ylabel " << gq(m) << "\nplot $pertrial using 1:2 with linespoints pt 7 ps 0.6\n";
    o << "set title " << gq("best " + m + " so far vs spend") << "\nplot $best using 1:2 with steps lw 2\n";
    for (int i = 0; i < P; i++) {
      const std::string name = params[i].at("name").get<std::string>();
      const auto choices = params[i].value("choices", std::vector<std::string>{});
      o << "set title " << gq(name + " vs " + m + " (colour: rung)") << "\nset xlabel " << gq(name) << "\n";
      o << (params[i].value("kind", std::string()) == "loguniform" ? "set logscale x\n" : "unset logscale x\n");
      if (!choices.empty()) {
        o << "set xtics (";
        for (size_t c = 0; c < choices.size(); c++)
          o << (c ? ", " : "") << gq(choices[c]) << " " << c;
        o << ") norotate\nset xrange [-0.5:" << choices.size() - 0.5 << "]\n";
      } else {
        o << "set xtics autofreq norotate\nset autoscale x\n";
      }
      o << "plot $hp" << i << " using 1:2:3 with points pt 7 ps 1 lc variable\n";
    }
    o << "unset multiplot\n";
  };
  std::ostringstream body;
  panels(body);
  g << "set terminal pngcairo size 1100," << 340 * rows << " noenhanced\nset output " << gq(png) << "\n" << body.str();
  g << "set terminal svg size 1100," << 340 * rows << " noenhanced background rgb 'white'\nset output " << gq(svg) << "\n"
    << "unset logscale x\nset xtics autofreq\nset autoscale x\n" << body.str() << "set output\n";
  return g.str();
}

}  // namespace ratchet::sweep
