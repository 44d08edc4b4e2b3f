// Renders a Chrome trace (the tandem schema of trace.hpp) to a standalone SVG for a quick
// look without a browser: one row per (rank, stream) that has slices, forward and
// backward told apart by colour (lighter shades for later virtual chunks), the op's
// microbatch written inside each slice wide enough to hold it, idle time (the bubble)
// left as the row's pale background, and a time axis. It stays small for any run: ranks
// whose rows are identical up to the rank id (a stage's tp and dp peers) are drawn once,
// labelled "ranks 0-3, 8 (5)" and said so under the title, and slices narrower than 2 px
// are merged per pixel column, so its size follows the distinct timelines and the width,
// not the number of ranks or slices.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tandem {

struct SvgOptions {
  std::string title;
  int width = 1400;       // px, whole drawing
  int row_height = 26;    // px
  int label_width = 240;  // px, the row names on the left
};

std::string render_trace_svg(const nlohmann::json& trace, const SvgOptions& options = {});

}  // namespace tandem
