// Megatron command lines and launch scripts: the argument reader (argparse's rules for
// pretrain_gpt.py's flags) and a reader for the small part of bash that launch scripts use.
#include "core/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "core/error.hpp"

namespace tandem {
namespace {

std::string kebab(std::string_view snake) {
  std::string flag = "--" + std::string(snake);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

bool is_flag(std::string_view word) {
  // argparse reads "-5" and "-1e-3" as values, "--x" and "-x" as flags.
  return word.size() > 1 && word[0] == '-' &&
         !(std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.');
}

const MegatronArgument* find_argument(std::string_view flag) {
  const auto table = megatron_arguments();
  const auto it =
      std::lower_bound(table.begin(), table.end(), flag,
                       [](const MegatronArgument& a, std::string_view f) { return a.flag < f; });
  return it != table.end() && it->flag == flag ? &*it : nullptr;
}

std::vector<std::string> all_flags() {
  std::vector<std::string> flags;
  for (const auto& a : megatron_arguments()) flags.emplace_back(a.flag);
  return flags;
}

}  // namespace

std::optional<ModelledArgument> modelled_argument(const MegatronArgument& a) {
  if (a.flag == "--recompute-activations")
    return ModelledArgument{"recompute_granularity", "selective"};
  if (a.flag == "--train-samples") return ModelledArgument{"train_iters", "", true};
  if (a.flag == "--lr-decay-samples") return ModelledArgument{"lr_decay_iters", "", true};
  if (a.flag == "--lr-warmup-samples" || a.flag == "--lr-warmup-fraction")
    return ModelledArgument{"lr_warmup_iters", "", true};
  for (const auto& f : scenario_fields()) {
    // By flag: our field is named as Megatron spells the flag (--disable-bias-linear sets
    // disable_bias_linear, where Megatron stores add_bias_linear = false).
    bool by_flag = f.flag == a.flag;
    for (const auto& alias : f.aliases) by_flag = by_flag || kebab(alias) == a.flag;
    if (by_flag) return ModelledArgument{f.name, a.nargs == "0" ? "true" : ""};
    bool by_dest = f.name == a.dest;
    for (const auto& alias : f.aliases) by_dest = by_dest || alias == a.dest;
    if (by_dest) return ModelledArgument{f.name, std::string(a.stores)};
  }
  return std::nullopt;
}

namespace {
// Arguments tandem does not model that change what the model computes: listing them as "not
// modelled" and going on would simulate and train another model than the one asked for.
// Empty when `flag` is not one of them (or is given in a form that changes nothing).
std::string changes_the_model(const std::string& flag, const std::vector<std::string>& /*values*/) {
  static const std::map<std::string, std::string> refused{
      {"--mtp-use-repeated-layer",
       "one MTP layer applied at every depth is not built: tandem builds a layer per depth"},
      {"--mtp-detach-heads",
       "MTP heads detached from the main model are not built: the MTP loss would reach the "
       "decoder"},
      {"--mtp-hsm", "MTP hidden-state mixing is not built"},
      {"--hybrid-override-pattern", "hybrid (Mamba) layers are not built"},
      {"--experimental-attention-variant",
       "attention variants other than softmax attention "
       "are not built"},
      {"--heterogeneous-layers-config-path", "heterogeneous layers are not built"},
      {"--heterogeneous-layers-config-encoded-json", "heterogeneous layers are not built"},
      {"--spec", "a custom layer spec is not built: tandem builds Megatron-Core's GPT layer"},
  };
  const auto it = refused.find(flag);
  if (it == refused.end()) return "";
  return it->second + " (refused rather than ignored)";
}
}  // namespace

MegatronCommandLine parse_megatron_args(const std::vector<std::string>& args) {
  MegatronCommandLine cl;
  std::vector<Violation> out;
  std::size_t i = 0;
  while (i < args.size()) {
    const std::string& word = args[i++];
    if (!is_flag(word)) {
      out.push_back({word, "", "is a value with no flag before it (pretrain_gpt.py takes none)"});
      continue;
    }
    const auto eq = word.find('=');
    const std::string flag = word.substr(0, eq);
    std::vector<std::string> values;
    if (eq != std::string::npos) values.push_back(word.substr(eq + 1));
    const MegatronArgument* a = find_argument(flag);
    if (!a) {
      while (i < args.size() && !is_flag(args[i])) ++i;  // its values, if any
      const std::string best = closest_match(flag, all_flags());
      out.push_back({flag, "",
                     best.empty() ? "is not an argument of Megatron-LM's pretrain_gpt.py"
                                  : "is not an argument of Megatron-LM's pretrain_gpt.py; did "
                                    "you mean " +
                                        best + "?"});
      continue;
    }
    // How many values argparse would take for it.
    std::size_t want_min = 1, want_max = 1;
    if (a->nargs == "0") want_min = want_max = 0;
    if (a->nargs == "+") want_max = args.size();
    if (a->nargs == "?") want_min = 0;
    if (std::isdigit(static_cast<unsigned char>(a->nargs[0])))
      want_min = want_max = static_cast<std::size_t>(std::stoi(std::string(a->nargs)));
    if (eq == std::string::npos)
      while (values.size() < want_max && i < args.size() && !is_flag(args[i]))
        values.push_back(args[i++]);
    if (values.size() < want_min || values.size() > want_max) {
      const std::string given = values.empty() ? "" : values.front();
      out.push_back({flag, given,
                     want_max == 0 ? "is a switch and takes no value"
                     : a->nargs == "+"
                         ? "expects one or more values"
                         : "expects " + std::string(a->nargs == "?" ? "at most 1" : a->nargs) +
                               " value" + (want_max == 1 ? "" : "s")});
      continue;
    }
    const auto m = modelled_argument(*a);
    if (!m) {
      if (const auto why = changes_the_model(flag, values); !why.empty())
        out.push_back({flag, values.empty() ? "" : values.front(), why});
      else
        cl.not_modelled.emplace_back(flag, values);
      continue;
    }
    if (m->sample_based) {
      double x = 0;
      const auto [p, ec] =
          std::from_chars(values[0].data(), values[0].data() + values[0].size(), x);
      if (ec != std::errc() || p != values[0].data() + values[0].size() || x < 0)
        out.push_back({flag, values[0], "must be a non-negative number"});
      else
        cl.sample_based.emplace_back(flag, x);
      continue;
    }
    std::string text;
    if (want_max == 0)
      text = m->switch_value;
    else
      for (const auto& v : values) text += (text.empty() ? "" : " ") + v;
    cl.overrides.emplace_back(m->field, text);
  }
  if (!out.empty()) throw ConfigError(std::move(out), "Megatron arguments");
  return cl;
}

std::string not_modelled_line(const MegatronCommandLine& cl) {
  if (cl.not_modelled.empty()) return "";
  std::string line = "not modelled:";
  std::vector<std::string> seen;
  for (const auto& [flag, values] : cl.not_modelled) {
    if (std::find(seen.begin(), seen.end(), flag) != seen.end()) continue;
    seen.push_back(flag);
    line += (seen.size() == 1 ? " " : ", ") + flag;
  }
  return line;
}

void check_megatron_required(const MegatronCommandLine& cl) {
  std::vector<Violation> out;
  for (const char* field :
       {"num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"}) {
    const bool given = std::any_of(cl.overrides.begin(), cl.overrides.end(),
                                   [&](const auto& kv) { return kv.first == field; });
    if (!given)
      out.push_back({kebab(field), "(none)",
                     "is required by Megatron-LM (arguments.py) when no scenario file is given"});
  }
  if (!out.empty()) throw ConfigError(std::move(out), "Megatron arguments");
}

void apply_sample_based(const MegatronCommandLine& cl,
                        const std::vector<std::pair<std::string, std::string>>& given,
                        Scenario& s) {
  if (cl.sample_based.empty()) return;
  std::map<std::string, double> v(cl.sample_based.begin(), cl.sample_based.end());
  auto set = [&](std::string_view field) {
    return std::any_of(given.begin(), given.end(),
                       [&](const auto& kv) { return kv.first == field; });
  };
  std::vector<Violation> out;
  auto& t = s.training;
  const double batch = t.global_batch_size;
  const bool samples = v.count("--train-samples") > 0;
  // Megatron's asserts: one way of counting, and one way of giving the warmup.
  if (samples && set("train_iters"))
    out.push_back(
        {"--train-samples", "", "expected sample-based training: not with --train-iters"});
  if (samples && set("lr_decay_iters"))
    out.push_back({"--lr-decay-iters", "", "expected sample-based learning rate decay"});
  if (samples && set("lr_warmup_iters"))
    out.push_back({"--lr-warmup-iters", "", "expected sample-based learning rate warmup"});
  if (!samples && (v.count("--lr-decay-samples") || v.count("--lr-warmup-samples")))
    out.push_back({v.count("--lr-decay-samples") ? "--lr-decay-samples" : "--lr-warmup-samples", "",
                   "needs sample-based training (--train-samples)"});
  if (v.count("--lr-warmup-fraction") && (v.count("--lr-warmup-samples") || set("lr_warmup_iters")))
    out.push_back({"--lr-warmup-fraction", "",
                   "give one of --lr-warmup-fraction, --lr-warmup-iters and --lr-warmup-samples"});
  if (!out.empty()) throw ConfigError(std::move(out), "Megatron arguments");
  auto iterations = [&](double n) { return static_cast<std::int64_t>(std::llround(n / batch)); };
  if (samples) {
    t.train_iters = static_cast<std::int64_t>(v["--train-samples"]) / t.global_batch_size;
    if (v.count("--lr-decay-samples")) t.lr_decay_iters = iterations(v["--lr-decay-samples"]);
    if (v.count("--lr-warmup-samples")) t.lr_warmup_iters = iterations(v["--lr-warmup-samples"]);
  }
  if (v.count("--lr-warmup-fraction"))
    t.lr_warmup_iters = static_cast<std::int64_t>(std::llround(
        v["--lr-warmup-fraction"] * static_cast<double>(t.lr_decay_iters.value_or(t.train_iters))));
}

Scenario megatron_default_scenario() {
  Scenario s;
  s.name = "megatron";
  s.description = "from a Megatron-LM command line";
  s.model.transformer_impl = "transformer_engine";  // Megatron's --transformer-impl default
  s.cluster.world_size = 1;
  s.training.min_lr = 0.0;
  s.training.lr_decay_style = "linear";
  s.training.log_interval = 100;
  s.training.eval_iters = 100;
  s.training.eval_interval = 1000;
  return s;
}

// ---------------------------------------------------------------------------------------
// Launch scripts.

namespace {

using Vars = std::map<std::string, std::vector<std::string>>;  // scalars are 1-element arrays

struct ScriptError {
  std::size_t line;
  std::string rule;
};

bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

std::vector<std::string> split_fields(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Integer arithmetic of $((…)): + - * / % and parentheses over numbers (variables are
// expanded before).
struct Arith {
  std::string_view s;
  std::size_t i = 0;
  void skip() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  long long primary() {
    skip();
    if (i < s.size() && s[i] == '(') {
      ++i;
      const long long v = sum();
      skip();
      if (i < s.size() && s[i] == ')') ++i;
      return v;
    }
    if (i < s.size() && s[i] == '-') {
      ++i;
      return -primary();
    }
    long long v = 0;
    const auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    if (ec != std::errc()) throw std::invalid_argument("not a number");
    i = static_cast<std::size_t>(p - s.data());
    return v;
  }
  long long product() {
    long long v = primary();
    for (skip(); i < s.size() && (s[i] == '*' || s[i] == '/' || s[i] == '%'); skip()) {
      const char op = s[i++];
      const long long r = primary();
      if (op != '*' && r == 0) throw std::invalid_argument("division by zero");
      v = op == '*' ? v * r : op == '/' ? v / r : v % r;
    }
    return v;
  }
  long long sum() {
    long long v = product();
    for (skip(); i < s.size() && (s[i] == '+' || s[i] == '-'); skip()) {
      const char op = s[i++];
      const long long r = product();
      v = op == '+' ? v + r : v - r;
    }
    return v;
  }
};

class ScriptReader {
 public:
  explicit ScriptReader(std::string_view text) : t_(text) {}

  LaunchScript run() {
    while (pos_ < t_.size()) {
      auto words = command();
      if (!words.empty()) execute(words);
    }
    if (!launch_) throw ScriptError{line_, "runs no pretrain_gpt.py (no word ends in it)"};
    return *launch_;
  }

 private:
  std::string_view t_;
  std::size_t pos_ = 0, line_ = 1, command_line_ = 1;
  Vars vars_;
  std::optional<LaunchScript> launch_;

  char peek(std::size_t ahead = 0) const {
    return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0';
  }
  char get() {
    const char c = t_[pos_++];
    if (c == '\n') ++line_;
    return c;
  }

  std::string var(const std::string& name) const {
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) return "";
    std::string out;
    for (const auto& v : it->second) out += (out.empty() ? "" : " ") + v;
    return out;
  }

  // Text up to the `close` that matches the opener just read, nesting on `open`.
  std::string balanced(char open, char close) {
    std::string out;
    int depth = 1;
    while (pos_ < t_.size()) {
      const char c = get();
      if (c == open) ++depth;
      if (c == close && --depth == 0) return out;
      out += c;
    }
    throw ScriptError{line_, std::string("has no closing '") + close + "'"};
  }

  // A string expanded as in double quotes (defaults of ${X:-…}, arithmetic).
  std::string expand_text(std::string_view text) {
    ScriptReader sub(text);
    sub.vars_ = vars_;
    sub.line_ = line_;
    std::string out;
    while (sub.pos_ < sub.t_.size()) {
      const char c = sub.get();
      if (c == '"' || c == '\'') continue;  // quotes inside a default only group
      if (c == '$') {
        for (const auto& f : sub.dollar()) out += f;
      } else {
        out += c;
      }
    }
    return out;
  }

  // After a '$': the words it expands to (one per array element for ${A[@]}).
  std::vector<std::string> dollar() {
    const char c = peek();
    if (c == '(' && peek(1) == '(') {
      pos_ += 2;
      std::string expr = balanced('(', ')');
      if (peek() == ')') get();
      if (!expr.empty() && expr.back() == ')') expr.pop_back();
      // $NAME first, then bare names, which arithmetic also reads as variables.
      const std::string dollars = expand_text(expr);
      std::string expanded;
      for (std::size_t i = 0; i < dollars.size();) {
        if (name_char(dollars[i], true)) {
          std::size_t k = i;
          while (k < dollars.size() && name_char(dollars[k], false)) ++k;
          expanded += var(dollars.substr(i, k - i));
          i = k;
        } else {
          expanded += dollars[i++];
        }
      }
      try {
        Arith a{expanded};
        return {std::to_string(a.sum())};
      } catch (const std::exception& e) {
        throw ScriptError{line_, "cannot evaluate $((" + expr + ")): " + e.what()};
      }
    }
    if (c == '(') {  // command substitution: not run
      get();
      balanced('(', ')');
      return {""};
    }
    if (c == '{') {
      get();
      const std::string inner = balanced('{', '}');
      std::size_t k = 0;
      while (k < inner.size() && (name_char(inner[k], k == 0) ||
                                  (k == 0 && std::isdigit(static_cast<unsigned char>(inner[k])))))
        ++k;
      const std::string name = inner.substr(0, k);
      const std::string rest = inner.substr(k);
      if (rest == "[@]" || rest == "[*]") {
        auto it = vars_.find(name);
        return it == vars_.end() ? std::vector<std::string>{} : it->second;
      }
      if (rest.starts_with(":-") || rest.starts_with("-")) {
        const std::string value = var(name);
        if (!value.empty()) return {value};
        return {expand_text(rest.substr(rest[0] == ':' ? 2 : 1))};
      }
      if (!rest.empty()) throw ScriptError{line_, "cannot expand ${" + inner + "}"};
      return {var(name)};
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '@' || c == '*' || c == '#') {
      get();
      return {""};  // positional parameters: the script runs with none
    }
    std::string name;
    while (name_char(peek(), name.empty())) name += get();
    if (name.empty()) return {"$"};
    return {var(name)};
  }

  // One command: words after expansion, up to an unquoted newline or ';'. Arrays
  // `NAME=(…)` come back as the word "NAME=(" followed by their elements and ")".
  std::vector<std::string> command() {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false, in_array = false;
    auto finish = [&] {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    };
    command_line_ = line_;
    while (pos_ < t_.size()) {
      const char c = peek();
      if (c == '\\' && peek(1) == '\n') {
        get();
        get();
        continue;
      }
      if ((c == '\n' || c == ';') && !in_array) {
        get();
        finish();
        if (!words.empty()) return words;
        command_line_ = line_;
        continue;
      }
      if (std::isspace(static_cast<unsigned char>(c))) {
        get();
        finish();
        continue;
      }
      if (c == '#' && !in_word) {
        while (pos_ < t_.size() && peek() != '\n') get();
        continue;
      }
      if (c == '(' && in_word && !in_array && word.back() == '=') {
        get();
        word += '(';
        finish();
        in_array = true;
        continue;
      }
      if (c == ')' && in_array) {  // unquoted ')' always ends a word in bash
        get();
        finish();
        words.push_back(")");
        in_array = false;
        continue;
      }
      get();
      const bool was_in_word = in_word;
      in_word = true;
      if (c == '\'') {
        while (pos_ < t_.size() && peek() != '\'') word += get();
        if (pos_ < t_.size()) get();
      } else if (c == '"') {
        // "${EMPTY[@]}" is no word at all, as in bash ("" is an empty word).
        bool empty_array = false, other = false;
        while (pos_ < t_.size() && peek() != '"') {
          const char d = get();
          if (d == '\\' && (peek() == '"' || peek() == '$' || peek() == '\\'))
            word += get();
          else if (d == '$') {
            const bool all =
                peek() == '{' && t_.substr(pos_).find("[@]}") == t_.substr(pos_).find('}') - 3;
            auto fields = dollar();
            (all && fields.empty() ? empty_array : other) = true;
            // "${A[@]}" keeps each element one word; anything else joins.
            for (std::size_t k = 0; k < fields.size(); ++k) {
              if (k > 0 && all) {
                words.push_back(word);
                word.clear();
              }
              word += (k > 0 && !all ? " " : "") + fields[k];
            }
          } else {
            word += d;
            other = true;
          }
        }
        if (pos_ < t_.size()) get();
        if (empty_array && !other && word.empty() && !was_in_word) in_word = false;
      } else if (c == '$') {
        // Unquoted: every expansion is split into words on white space; an empty one
        // makes no word.
        std::vector<std::string> fields;
        for (const auto& f : dollar())
          for (auto& w : split_fields(f)) fields.push_back(w);
        if (fields.empty()) {
          in_word = was_in_word;
          continue;
        }
        word += fields.front();
        for (std::size_t k = 1; k < fields.size(); ++k) {
          words.push_back(word);
          word = fields[k];
        }
      } else if (c == '\\') {
        if (pos_ < t_.size()) word += get();
      } else {
        word += c;
      }
    }
    if (in_array) throw ScriptError{command_line_, "has an array with no closing ')'"};
    finish();
    return words;
  }

  static std::optional<std::pair<std::string, bool>> assignment(const std::string& w) {
    std::size_t k = 0;
    while (k < w.size() && name_char(w[k], k == 0)) ++k;
    if (k == 0 || k >= w.size()) return std::nullopt;
    if (w[k] == '=') return std::pair{w.substr(0, k), false};
    if (w[k] == '+' && k + 1 < w.size() && w[k + 1] == '=') return std::pair{w.substr(0, k), true};
    return std::nullopt;
  }

  void execute(std::vector<std::string> words) {
    static const std::vector<std::string> kControl = {"if",   "then",  "elif",    "else", "fi",
                                                      "for",  "while", "until",   "do",   "done",
                                                      "case", "esac",  "function"};
    if (std::find(kControl.begin(), kControl.end(), words[0]) != kControl.end())
      throw ScriptError{command_line_,
                        "uses `" + words[0] +
                            "`: tandem reads assignments, arrays and the launch command but runs "
                            "no control flow; write the arguments out, or pass them after --"};
    if (words[0] == "export" || words[0] == "local" || words[0] == "declare")
      words.erase(words.begin());
    // Assignments, possibly several, and arrays.
    std::size_t i = 0;
    while (i < words.size()) {
      const auto a = assignment(words[i]);
      if (!a) break;
      const auto& [name, append] = *a;
      const std::string value = words[i].substr(name.size() + (append ? 2 : 1));
      if (value == "(") {
        std::vector<std::string> items;
        for (++i; i < words.size() && words[i] != ")"; ++i) items.push_back(words[i]);
        ++i;  // ")"
        auto& target = vars_[name];
        if (!append) target.clear();
        target.insert(target.end(), items.begin(), items.end());
      } else {
        auto& target = vars_[name];
        if (append && !target.empty())
          target.back() += value;
        else
          target = {value};
        ++i;
      }
    }
    if (i >= words.size()) return;
    // The launch: the command with a word ending in pretrain_gpt.py.
    for (std::size_t k = i; k < words.size(); ++k) {
      if (!words[k].ends_with("pretrain_gpt.py")) continue;
      if (launch_) throw ScriptError{command_line_, "runs pretrain_gpt.py a second time"};
      LaunchScript l;
      l.args.assign(words.begin() + static_cast<std::ptrdiff_t>(k) + 1, words.end());
      launcher(words, i, k, l);
      launch_ = std::move(l);
      return;
    }
  }

  // torchrun's (or python -m torch.distributed.run's) --nproc_per_node and --nnodes.
  void launcher(const std::vector<std::string>& words, std::size_t from, std::size_t to,
                LaunchScript& l) const {
    for (std::size_t k = from; k < to; ++k) {
      std::string w = words[k], value;
      if (const auto eq = w.find('='); eq != std::string::npos && w.starts_with("--")) {
        value = w.substr(eq + 1);
        w = w.substr(0, eq);
      } else if (k + 1 < to) {
        value = words[k + 1];
      }
      std::replace(w.begin(), w.end(), '_', '-');
      std::optional<int>* target = w == "--nproc-per-node" ? &l.nproc_per_node
                                   : w == "--nnodes"       ? &l.nnodes
                                                           : nullptr;
      if (!target) continue;
      int n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size() || n < 1)
        throw ScriptError{command_line_,
                          "torchrun " + words[k] + " " + value + ": needs a positive integer"};
      *target = n;
    }
  }
};

}  // namespace

LaunchScript parse_launch_script(std::string_view text, std::string_view where) {
  try {
    return ScriptReader(text).run();
  } catch (const ScriptError& e) {
    throw ConfigError(std::string(where), "line " + std::to_string(e.line), e.rule);
  }
}

LaunchScript read_launch_script(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!std::filesystem::is_regular_file(path) || !in)
    throw ConfigError("--megatron-script", path.string(), "no such file");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return parse_launch_script(text, path.string());
}

}  // namespace tandem
