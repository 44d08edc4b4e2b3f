// Decoding one value, from JSON or from flag text, into each C++ type a scenario field may
// have (int, int64, double, bool, string, optional, int list). Internal to the scenario:
// the registry (scenario_fields.cpp) binds these to each field.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/scenario_detail.hpp"

namespace tandem::scenario_detail {

// Decoding a value, from JSON or from flag text, into each C++ type a field may have.
// Each returns "" on success or the type rule the input broke.

inline std::string decode_integer(const json& j, std::int64_t lo, std::int64_t hi,
                                  std::int64_t& out) {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(kMax))
    return "is too large";
  if (j.is_number_integer()) {
    out = j.get<std::int64_t>();
  } else if (j.is_number_float()) {
    // 4e7 is an integer written in exponent notation; 2.5 is not an integer.
    const double d = j.get<double>();
    if (d != std::trunc(d) || std::abs(d) > 9e15) return "must be an integer";
    out = static_cast<std::int64_t>(d);
  } else {
    return cat("must be an integer, not a JSON ", j.type_name());
  }
  if (out < lo || out > hi) return "is out of range for a 32-bit integer";
  return "";
}

inline std::string decode(const json& j, std::int64_t& out) {
  return decode_integer(j, std::numeric_limits<std::int64_t>::min(),
                        std::numeric_limits<std::int64_t>::max(), out);
}

inline std::string decode(const json& j, int& out) {
  std::int64_t wide = 0;
  auto err =
      decode_integer(j, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), wide);
  if (err.empty()) out = static_cast<int>(wide);
  return err;
}

inline std::string decode(const json& j, double& out) {
  if (!j.is_number()) return cat("must be a number, not a JSON ", j.type_name());
  out = j.get<double>();
  return "";
}

inline std::string decode(const json& j, bool& out) {
  if (!j.is_boolean()) return cat("must be true or false, not a JSON ", j.type_name());
  out = j.get<bool>();
  return "";
}

inline std::string decode(const json& j, std::string& out) {
  if (!j.is_string()) return cat("must be a string, not a JSON ", j.type_name());
  out = j.get<std::string>();
  return "";
}

template <class T>
std::string decode(const json& j, std::optional<T>& out) {
  if (j.is_null()) {
    out.reset();
    return "";
  }
  T value{};
  auto err = decode(j, value);
  if (err.empty()) out = value;
  return err;
}

inline std::string decode(const json& j, std::vector<std::int64_t>& out) {
  if (j.is_null()) {
    out.clear();
    return "";
  }
  if (!j.is_array()) return cat("must be a list of integers, not a JSON ", j.type_name());
  std::vector<std::int64_t> items;
  for (const auto& item : j) {
    std::int64_t x = 0;
    if (!decode(item, x).empty()) return "must be a list of integers";
    items.push_back(x);
  }
  out = std::move(items);
  return "";
}

// Flag text → the JSON value it denotes for a field of type T; nullopt when it denotes
// none. The JSON then goes through decode(), so flags and files obey the same rules.
inline std::string_view trimmed(std::string_view t) {
  const auto first = t.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return t.substr(first, t.find_last_not_of(" \t\r\n") - first + 1);
}

inline std::optional<json> number_from_text(std::string_view text) {
  text = trimmed(text);
  const char* end = text.data() + text.size();
  std::int64_t i = 0;
  auto [pi, ei] = std::from_chars(text.data(), end, i);
  if (ei == std::errc() && pi == end && !text.empty()) return json(i);
  double d = 0;
  auto [pd, ed] = std::from_chars(text.data(), end, d);
  if (ed == std::errc() && pd == end && !text.empty() && std::isfinite(d)) return json(d);
  return std::nullopt;
}

template <class T>
std::optional<json> text_to_json(std::string_view text, const T*) {
  if constexpr (std::is_same_v<T, bool>) {
    const std::string t = lower(trimmed(text));
    if (t == "true" || t == "1") return json(true);
    if (t == "false" || t == "0") return json(false);
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return json(std::string(text));
  } else {
    return number_from_text(text);
  }
}

template <class T>
std::optional<json> text_to_json(std::string_view text, const std::optional<T>*) {
  const std::string t = lower(trimmed(text));
  if (t.empty() || t == "none" || t == "null") return json(nullptr);
  return text_to_json(text, static_cast<const T*>(nullptr));
}

// "16,16,1000", "16 16 1000" (as Megatron's nargs flags are written), or "" for none.
inline std::optional<json> text_to_json(std::string_view text, const std::vector<std::int64_t>*) {
  json items = json::array();
  std::string token;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) {
    std::istringstream parts(word);
    while (std::getline(parts, token, ',')) {
      if (token.empty()) continue;
      auto n = number_from_text(token);
      if (!n) return std::nullopt;
      items.push_back(*n);
    }
  }
  return items;
}

template <class T>
const char* text_rule(const T*) {
  if constexpr (std::is_same_v<T, bool>) return "must be true, false, 1 or 0";
  if constexpr (std::is_same_v<T, double>) return "must be a number";
  return "must be an integer";
}
template <class T>
const char* text_rule(const std::optional<T>*) {
  return text_rule(static_cast<const T*>(nullptr));
}
inline const char* text_rule(const std::vector<std::int64_t>*) {
  return "must be a list of integers, e.g. \"16,16,1000\" or \"16 16 1000\"";
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, double>) return "float";
  if constexpr (std::is_same_v<T, std::string>) return "string";
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "int list";
  return "int";
}
template <class T>
struct Unoptional {
  using type = T;
};
template <class T>
struct Unoptional<std::optional<T>> {
  using type = T;
};

}  // namespace tandem::scenario_detail
