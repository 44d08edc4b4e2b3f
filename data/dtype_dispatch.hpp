// Calls a function with a value of the C++ type a TokenDType names, so the token stream's
// encode and decode loops are written once for every dtype.
#pragma once

#include <cstdint>

#include "data/indexed_dataset.hpp"

namespace tandem::data {

template <typename F>
decltype(auto) visit_dtype(TokenDType dtype, F&& f) {
  switch (dtype) {
    case TokenDType::uint8:
      return f(std::uint8_t{});
    case TokenDType::int8:
      return f(std::int8_t{});
    case TokenDType::int16:
      return f(std::int16_t{});
    case TokenDType::int32:
      return f(std::int32_t{});
    case TokenDType::int64:
      return f(std::int64_t{});
    case TokenDType::float64:
      return f(double{});
    case TokenDType::float32:
      return f(float{});
    case TokenDType::uint16:
      break;
  }
  return f(std::uint16_t{});
}

}  // namespace tandem::data
