#include "train/checkpoint.hpp"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace tandem {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'C', 'K'};
constexpr std::uint32_t kVersion = 1;

std::uint32_t crc_of(const std::vector<char>& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < bytes.size()) {  // zlib takes uInt lengths
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), n);
    done += n;
  }
  return static_cast<std::uint32_t>(crc);
}

template <typename T>
void put(std::ostream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string iter_dir(std::int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

}  // namespace

std::filesystem::path checkpoint_file(const std::filesystem::path& dir, std::int64_t iteration,
                                      int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.ckpt", rank);
  return dir / iter_dir(iteration) / name;
}

void save_checkpoint(const std::filesystem::path& dir, const CheckpointState& st) {
  std::vector<char> payload;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : st.tensors) {
    const std::size_t bytes = t.values.size() * sizeof(float);
    tensors.push_back(
        {{"name", t.name}, {"elements", t.values.size()}, {"offset", payload.size()}});
    const std::size_t at = payload.size();
    payload.resize(at + bytes);
    if (bytes > 0) std::memcpy(payload.data() + at, t.values.data(), bytes);  // data() may be null
  }
  nlohmann::json header = {{"iteration", st.iteration},
                           {"consumed_samples", st.consumed_samples},
                           {"optimizer_steps", st.optimizer_steps},
                           {"rank", st.rank},
                           {"world_size", st.world_size},
                           {"scenario", st.scenario},
                           {"tensors", tensors},
                           {"payload_bytes", payload.size()},
                           {"crc32", crc_of(payload)}};
  if (!st.parameters.is_null()) header["parameters"] = st.parameters;
  const std::string text = header.dump();
  const auto path = checkpoint_file(dir, st.iteration, st.rank);
  std::filesystem::create_directories(path.parent_path());
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write checkpoint " + tmp);
    out.write(kMagic, sizeof kMagic);
    put(out, kVersion);
    put(out, static_cast<std::uint64_t>(text.size()));
    out << text;
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.flush();
    if (!out) throw std::runtime_error("writing checkpoint " + tmp + " failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

void mark_latest_checkpoint(const std::filesystem::path& dir, std::int64_t iteration) {
  const auto path = dir / "latest_checkpointed_iteration.txt";
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << iteration << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

std::int64_t latest_checkpoint_iteration(const std::filesystem::path& dir) {
  const auto path = dir / "latest_checkpointed_iteration.txt";
  std::ifstream in(path);
  if (!in)
    throw ConfigError("load", dir.string(),
                      "holds no checkpoint (no " + path.filename().string() + ")");
  std::int64_t it = -1;
  in >> it;
  if (!in || it < 0) throw ConfigError("load", path.string(), "does not hold an iteration number");
  return it;
}

CheckpointState load_checkpoint(const std::filesystem::path& dir, std::int64_t iteration,
                                int rank) {
  const auto path = checkpoint_file(dir, iteration, rank);
  const std::string where = path.string();
  auto fail = [&](const std::string& why) { return ConfigError("checkpoint", where, why); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail("cannot be opened (was it written by a run with this many ranks?)");
  std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t fixed = sizeof kMagic + sizeof(std::uint32_t) + sizeof(std::uint64_t);
  if (all.size() < fixed || std::memcmp(all.data(), kMagic, sizeof kMagic) != 0)
    throw fail("is not a tandem checkpoint (bad magic)");
  std::uint32_t version = 0;
  std::uint64_t header_bytes = 0;
  std::memcpy(&version, all.data() + sizeof kMagic, sizeof version);
  std::memcpy(&header_bytes, all.data() + sizeof kMagic + sizeof version, sizeof header_bytes);
  if (version != kVersion)
    throw fail("has format version " + std::to_string(version) + ", this tandem reads " +
               std::to_string(kVersion));
  if (header_bytes > all.size() - fixed) throw fail("is truncated inside its header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(all.begin() + static_cast<std::ptrdiff_t>(fixed),
                                   all.begin() + static_cast<std::ptrdiff_t>(fixed + header_bytes));
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("has a corrupt header: ") + e.what());
  }
  const std::size_t payload_at = fixed + header_bytes;
  // The header is outside the CRC: a field missing or of the wrong type is a corrupt file.
  try {
    const auto payload_bytes = header.at("payload_bytes").get<std::size_t>();
    if (all.size() - payload_at != payload_bytes)
      throw fail("holds " + std::to_string(all.size() - payload_at) +
                 " payload bytes, its header says " + std::to_string(payload_bytes) +
                 " (truncated or appended to)");
    std::vector<char> payload(all.begin() + static_cast<std::ptrdiff_t>(payload_at), all.end());
    if (crc_of(payload) != header.at("crc32").get<std::uint32_t>())
      throw fail("fails its CRC-32 check: the data is corrupt");
    CheckpointState st;
    st.iteration = header.at("iteration");
    st.consumed_samples = header.at("consumed_samples");
    st.optimizer_steps = header.at("optimizer_steps");
    st.rank = header.at("rank");
    st.world_size = header.at("world_size");
    st.scenario = header.at("scenario");
    st.parameters = header.value("parameters", nlohmann::json{});
    for (const auto& t : header.at("tensors")) {
      const std::string name = t.at("name");
      const auto elements = t.at("elements").get<std::size_t>();
      const auto offset = t.at("offset").get<std::size_t>();
      // Checked before allocating: a corrupt count must not ask for exabytes.
      if (offset > payload.size() || elements > (payload.size() - offset) / sizeof(float))
        throw fail("tensor " + name + " runs past the payload");
      CheckpointTensor ct{name, std::vector<float>(elements)};
      if (!ct.values.empty())
        std::memcpy(ct.values.data(), payload.data() + offset, ct.values.size() * sizeof(float));
      st.tensors.push_back(std::move(ct));
    }
    if (st.rank != rank) throw fail("was written by rank " + std::to_string(st.rank));
    return st;
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("has a corrupt header: ") + e.what());
  }
}

}  // namespace tandem
