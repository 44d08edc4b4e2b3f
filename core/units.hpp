// Unit types for the quantities tandem trades in: bytes, time, FLOPs and rates.
// A size in bytes is never an element count and a duration is never a bare double;
// the types make the compiler say so. Arithmetic stays within a unit, and the few
// cross-unit operations that make physical sense (bytes / rate = time) are spelled out.
#pragma once

#include <compare>
#include <cstdint>

namespace tandem {

template <typename Tag, typename Rep>
struct Quantity {
  Rep value{};

  constexpr Quantity() = default;
  constexpr explicit Quantity(Rep v) : value(v) {}

  constexpr auto operator<=>(const Quantity&) const = default;
  constexpr Quantity operator+(Quantity o) const { return Quantity(value + o.value); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value - o.value); }
  constexpr Quantity& operator+=(Quantity o) {
    value += o.value;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value -= o.value;
    return *this;
  }
  constexpr Quantity operator*(Rep k) const { return Quantity(value * k); }
  constexpr Quantity operator/(Rep k) const { return Quantity(value / k); }
  constexpr double operator/(Quantity o) const {
    return static_cast<double>(value) / static_cast<double>(o.value);
  }
};

struct BytesTag {};
struct SecondsTag {};
struct FlopsTag {};
struct FlopsPerSecondTag {};
struct BytesPerSecondTag {};

using Bytes = Quantity<BytesTag, std::int64_t>;              // a memory size or message size
using Seconds = Quantity<SecondsTag, double>;                // a duration or a point in time
using Flops = Quantity<FlopsTag, double>;                    // a count of floating-point ops
using FlopsPerSecond = Quantity<FlopsPerSecondTag, double>;  // a compute rate
using BytesPerSecond = Quantity<BytesPerSecondTag, double>;  // a bandwidth (one direction)

constexpr Seconds operator/(Bytes b, BytesPerSecond r) {
  return Seconds(static_cast<double>(b.value) / r.value);
}
constexpr Seconds operator/(Flops f, FlopsPerSecond r) {
  return Seconds(f.value / r.value);
}
constexpr FlopsPerSecond operator/(Flops f, Seconds t) {
  return FlopsPerSecond(f.value / t.value);
}
constexpr BytesPerSecond operator/(Bytes b, Seconds t) {
  return BytesPerSecond(static_cast<double>(b.value) / t.value);
}

namespace literals {
constexpr Bytes operator""_B(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v));
}
constexpr Bytes operator""_KiB(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v) << 10);
}
constexpr Bytes operator""_MiB(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v) << 20);
}
constexpr Bytes operator""_GiB(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v) << 30);
}
constexpr Seconds operator""_s(long double v) {
  return Seconds(static_cast<double>(v));
}
constexpr Seconds operator""_ms(long double v) {
  return Seconds(static_cast<double>(v) * 1e-3);
}
constexpr Seconds operator""_us(long double v) {
  return Seconds(static_cast<double>(v) * 1e-6);
}
}  // namespace literals

}  // namespace tandem
