// A read-only memory map of a whole file, so an indexed dataset's token stream is paged
// in on demand instead of read up front. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace tandem::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws std::system_error naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  void unmap() noexcept;

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tandem::data
