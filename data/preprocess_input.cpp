// Reading and checking preprocess's input, one document at a time (inputs larger than
// memory stream through).
#include "data/preprocess_input.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "data/utf8.hpp"

namespace tandem::data {
namespace {

[[noreturn]] void reject(const std::filesystem::path& file, std::string field, std::string value,
                         std::string rule) {
  throw ConfigError({{std::move(field), std::move(value), std::move(rule)}}, file.string());
}

std::ifstream open_input(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) reject(file, "--input", file.string(), "cannot be read");
  return in;
}

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
  });
}

// Rejects text that is not UTF-8, naming the line (counted from `first_line`) and the
// byte within it.
void check_utf8(const std::filesystem::path& file, std::string_view text, long first_line) {
  const auto bad = find_invalid_utf8(text);
  if (!bad) return;
  const std::string_view before = text.substr(0, *bad);
  const long line = first_line + static_cast<long>(std::count(before.begin(), before.end(), '\n'));
  const auto line_start = before.rfind('\n');
  const auto column = *bad - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  reject(file, "line " + std::to_string(line), "byte " + std::to_string(column),
         "text must be UTF-8");
}

std::string key_list(const nlohmann::json& object) {
  std::string keys;
  for (const auto& [key, value] : object.items()) keys += (keys.empty() ? "" : ", ") + key;
  return keys.empty() ? "none" : keys;
}

void read_json_lines(const std::filesystem::path& file, const std::vector<std::string>& keys,
                     const std::function<void(InputDocument&&)>& consume) {
  std::ifstream in = open_input(file);
  std::string line;
  for (long line_number = 1; std::getline(in, line); ++line_number) {
    if (is_blank(line)) continue;
    const std::string where = "line " + std::to_string(line_number);
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse error or number overflow
      reject(file, where, "", std::string("not valid JSON: ") + e.what());
    }
    if (!json.is_object()) reject(file, where, "", "expected a JSON object such as {\"text\": …}");
    InputDocument doc;
    for (const auto& key : keys) {
      const auto it = json.find(key);
      if (it == json.end())
        reject(file, where, "",
               "key '" + key + "' is missing (keys present: " + key_list(json) + ")");
      std::vector<std::string> sentences;
      if (it->is_string()) {
        sentences.push_back(it->get<std::string>());
      } else if (it->is_array() &&
                 std::all_of(it->begin(), it->end(), [](const auto& s) { return s.is_string(); })) {
        for (const auto& s : *it) sentences.push_back(s.get<std::string>());
      } else {
        reject(file, where + " key '" + key + "'", std::string(it->type_name()),
               "must be a string or a list of strings");
      }
      doc.fields.push_back(std::move(sentences));
    }
    consume(std::move(doc));
  }
}

void read_paragraphs(const std::filesystem::path& file,
                     const std::function<void(InputDocument&&)>& consume) {
  std::ifstream in = open_input(file);
  std::string line, paragraph;
  bool open = false;
  const auto flush = [&] {
    if (open) consume(InputDocument{{{std::move(paragraph)}}});
    paragraph.clear();
    open = false;
  };
  for (long line_number = 1; std::getline(in, line); ++line_number) {
    check_utf8(file, line, line_number);
    if (is_blank(line)) {
      flush();
      continue;
    }
    if (open) paragraph += '\n';
    paragraph += line;
    open = true;
  }
  flush();
}

void read_directory(const std::filesystem::path& dir,
                    const std::function<void(InputDocument&&)>& consume) {
  std::vector<std::filesystem::path> files;
  for (auto it = std::filesystem::recursive_directory_iterator(dir);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    if (it->path().filename().string().starts_with(".")) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in = open_input(file);
    std::ostringstream text;
    text << in.rdbuf();
    std::string content = text.str();
    check_utf8(file, content, 1);
    consume(InputDocument{{{std::move(content)}}});
  }
}

}  // namespace

InputKind input_kind(const std::filesystem::path& input) {
  if (std::filesystem::is_directory(input)) return InputKind::directory;
  const auto ext = input.extension();
  return ext == ".json" || ext == ".jsonl" ? InputKind::json_lines : InputKind::plain_text;
}

void read_documents(const std::filesystem::path& input, const std::vector<std::string>& keys,
                    const std::function<void(InputDocument&&)>& consume) {
  if (!std::filesystem::exists(input))
    reject(input, "--input", input.string(), "no such file or directory");
  if (keys.empty()) throw ConfigError("--json-keys", "", "give at least one key");
  const InputKind kind = input_kind(input);
  if (kind != InputKind::json_lines && keys.size() != 1)
    throw ConfigError("--json-keys", std::to_string(keys.size()) + " keys",
                      "plain-text input has one field: give one key (it names the output)");
  switch (kind) {
    case InputKind::json_lines:
      return read_json_lines(input, keys, consume);
    case InputKind::plain_text:
      return read_paragraphs(input, consume);
    case InputKind::directory:
      return read_directory(input, consume);
  }
}

}  // namespace tandem::data
