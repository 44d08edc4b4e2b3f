// `tandem trace`: tools on trace files — check one against the format's rules, draw one
// as SVG, diff two op class by op class (a predicted trace against a measured one).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "core/trace_diff.hpp"
#include "core/trace_svg.hpp"
#include "tools/cli.hpp"

namespace tandem::cli {
namespace {

nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("trace file", path, "cannot be opened");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError("trace file", path, std::string("is not valid JSON: ") + e.what());
  }
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Check or draw trace files (Chrome trace JSON)");
  cmd->require_subcommand(1);
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto title = std::make_shared<std::string>();

  auto* check =
      cmd->add_subcommand("check", "Check a trace against the Chrome trace format's rules");
  check->add_option("trace", *in, "Trace JSON")->required();
  check->callback([in] {
    const auto problems = check_trace(read_trace(*in));
    for (const auto& p : problems) std::cout << *in << ": " << p << "\n";
    if (!problems.empty())
      throw ConfigError("trace file", *in,
                        std::to_string(problems.size()) + " problem(s), listed above");
    std::cout << *in << ": well formed\n";
  });

  auto* svg = cmd->add_subcommand("svg", "Draw a trace as SVG");
  svg->add_option("trace", *in, "Trace JSON")->required();
  svg->add_option("svg", *out, "Output SVG")->required();
  svg->add_option("--title", *title, "Title drawn above the rows");
  svg->callback(
      [in, out, title] { write_file(*out, render_trace_svg(read_trace(*in), {.title = *title})); });

  auto* diff = cmd->add_subcommand(
      "diff",
      "Compare two traces op class by op class (F, B, allreduce tp, p2p, …): count, total and "
      "mean duration in each, and B/A; e.g. tandem simulate --trace vs tandem train --trace");
  auto other = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  diff->add_option("a", *in, "Trace JSON A (e.g. the predicted one)")->required();
  diff->add_option("b", *other, "Trace JSON B (e.g. the measured one)")->required();
  diff->add_option("--json", *json, "Write the comparison as JSON");
  diff->callback([in, other, json] {
    const auto a = summarize_trace(read_trace(*in), *in);
    const auto b = summarize_trace(read_trace(*other), *other);
    const TraceDiff d = diff_traces(a, b);
    std::cout << format_trace_diff(d, *in, *other);
    if (!json->empty()) {
      write_file(*json, to_json(d).dump(2) + "\n");
      std::cout << "wrote " << *json << "\n";
    }
  });
}

}  // namespace tandem::cli
