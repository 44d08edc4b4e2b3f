// GoogleTest main for MPI test programs: every rank runs the same suite in the same order
// (so their collectives pair up), rank 0 prints the usual report, the other ranks print
// only their failures prefixed with their rank, and the failure count is summed over the
// world so that every rank — and therefore mpirun — exits non-zero if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "exec/mpi/mpi_runtime.hpp"
#include "tests/mpi/mpi_test_support.hpp"

namespace tandem::testing {

namespace {

MpiCommunicator* g_world = nullptr;  // the runtime's world, valid during RUN_ALL_TESTS

// Prints failed assertions only, with the rank, so eight ranks' reports stay readable.
// The test's name is kept from OnTestStart: asking gtest for it while it reports a result
// would take a lock gtest already holds.
class RankFailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

MpiCommunicator& world() {
  return *g_world;
}

}  // namespace tandem::testing

int main(int argc, char** argv) {
  return tandem::run_mpi_main(argc, argv, [&](tandem::MpiRuntime& mpi) {
    ::testing::InitGoogleTest(&argc, argv);
    tandem::MpiCommunicator& world = mpi.world();
    tandem::testing::g_world = &world;
    if (world.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new tandem::testing::RankFailurePrinter(world.rank()));
    }
    const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    tandem::Tensor count =
        tandem::testing::filled(1, tandem::DType::int32, [&](auto) { return failed; });
    tandem::testing::NullStream stream;
    world.all_reduce(stream, count, tandem::ReduceOp::sum)->wait();
    const auto failed_ranks = tandem::testing::get(count, 0);
    if (world.rank() == 0 && failed_ranks > 0)
      std::fprintf(stderr, "%lld of %d ranks had failing tests\n",
                   static_cast<long long>(failed_ranks), world.size());
    tandem::testing::g_world = nullptr;
    return failed_ranks > 0 ? 1 : 0;
  });
}
