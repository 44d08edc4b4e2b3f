// Checkpoint files round-trip, and every kind of damage is refused with a message naming
// the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "train/checkpoint.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

CheckpointState sample_state() {
  CheckpointState st;
  st.iteration = 7;
  st.consumed_samples = 224;
  st.optimizer_steps = 7;
  st.rank = 1;
  st.world_size = 2;
  st.scenario = {{"model", {{"num_layers", 2}}}};
  st.tensors = {{"params", {1.0f, -2.5f, 3.25f}}, {"exp_avg", {0.5f}}, {"empty", {}}};
  return st;
}

std::string error_of(const fs::path& dir) {
  try {
    load_checkpoint(dir, 7, 1);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, RoundTrip) {
  const auto dir = fresh_dir("ckpt_round_trip");
  save_checkpoint(dir, sample_state());
  mark_latest_checkpoint(dir, 7);
  EXPECT_EQ(latest_checkpoint_iteration(dir), 7);
  const auto st = load_checkpoint(dir, 7, 1);
  EXPECT_EQ(st.consumed_samples, 224);
  EXPECT_EQ(st.optimizer_steps, 7);
  EXPECT_EQ(st.scenario, sample_state().scenario);
  ASSERT_EQ(st.tensors.size(), 3u);
  EXPECT_EQ(st.tensors[0].values, (std::vector<float>{1.0f, -2.5f, 3.25f}));
  EXPECT_EQ(st.tensors[1].values, std::vector<float>{0.5f});
  EXPECT_TRUE(st.tensors[2].values.empty());
  EXPECT_TRUE(fs::exists(checkpoint_file(dir, 7, 1)));
  EXPECT_FALSE(fs::exists(checkpoint_file(dir, 7, 1).string() + ".tmp"));
}

void corrupt(const fs::path& file, std::streamoff at, char value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at, at < 0 ? std::ios::end : std::ios::beg);
  f.put(value);
}

TEST(Checkpoint, FlippedPayloadByteFailsCrc) {
  const auto dir = fresh_dir("ckpt_crc");
  save_checkpoint(dir, sample_state());
  corrupt(checkpoint_file(dir, 7, 1), -2, 0x55);
  const auto msg = error_of(dir);
  EXPECT_NE(msg.find("CRC-32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank_00001.ckpt"), std::string::npos) << msg;
}

TEST(Checkpoint, TruncatedFileIsRefused) {
  const auto dir = fresh_dir("ckpt_truncated");
  save_checkpoint(dir, sample_state());
  const auto file = checkpoint_file(dir, 7, 1);
  fs::resize_file(file, fs::file_size(file) - 4);
  EXPECT_NE(error_of(dir).find("truncated"), std::string::npos) << error_of(dir);
  fs::resize_file(file, 10);
  EXPECT_FALSE(error_of(dir).empty());
}

TEST(Checkpoint, BadMagicAndVersion) {
  const auto dir = fresh_dir("ckpt_magic");
  save_checkpoint(dir, sample_state());
  const auto file = checkpoint_file(dir, 7, 1);
  corrupt(file, 8, 9);  // version byte
  EXPECT_NE(error_of(dir).find("format version 9"), std::string::npos) << error_of(dir);
  corrupt(file, 0, 'X');
  EXPECT_NE(error_of(dir).find("bad magic"), std::string::npos) << error_of(dir);
}

TEST(Checkpoint, MissingFilesAreNamed) {
  const auto dir = fresh_dir("ckpt_missing");
  EXPECT_THROW(latest_checkpoint_iteration(dir), ConfigError);
  EXPECT_NE(error_of(dir).find("cannot be opened"), std::string::npos);
}

}  // namespace
}  // namespace tandem
