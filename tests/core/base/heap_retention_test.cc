#include "core/base/heap_retention.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace parallax {
namespace {

constexpr size_t kBlock = size_t{2} << 20;  // a step's message frame or pulled rows
constexpr int kBlocks = 4;                  // in flight at once
constexpr int kRounds = 20;

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// A shard's step in miniature: several blocks of a few MiB allocated,
// written and freed. Returns the page faults of rounds 2..kRounds (the first
// round faults the pages in whatever the settings).
long FaultsOfRepeatedRounds() {
  long after_first = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<char*> blocks;
    for (int b = 0; b < kBlocks; ++b) {
      char* p = static_cast<char*>(std::malloc(kBlock));
      std::memset(p, round + b, kBlock);
      blocks.push_back(p);
    }
    for (char* p : blocks) std::free(p);
    if (round == 0) after_first = MinorFaults();
  }
  return MinorFaults() - after_first;
}

// Runs `retain` then the rounds in a child process (the settings are the
// whole process's), and returns the child's count of page faults.
long FaultsInChild(bool retain) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    long faults = -2;
    if (!retain || RetainFreedHeapMemory().ok()) faults = FaultsOfRepeatedRounds();
    (void)!write(fds[1], &faults, sizeof faults);
    _exit(0);
  }
  close(fds[1]);
  long faults = -3;
  if (read(fds[0], &faults, sizeof faults) != sizeof faults) faults = -4;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return faults;
}

// With glibc's defaults the 8 MiB freed at the top of the heap is above the
// (dynamic) trim threshold and goes back to the kernel every round: about
// 2,000 faults a round. Retained, the rounds after the first fault nothing.
TEST(HeapRetentionTest, RepeatedBigBlocksFaultNoNewPages) {
  const long pages_per_round = static_cast<long>(kBlocks * kBlock / 4096);
  const long retained = FaultsInChild(/*retain=*/true);
  ASSERT_GE(retained, 0);
  EXPECT_LT(retained, pages_per_round / 4) << "faults over " << kRounds - 1 << " rounds";
}

TEST(HeapRetentionTest, ThresholdsGlibcRefusesAreErrors) {
  HeapRetentionOptions too_big;
  too_big.mmap_threshold = size_t{64} << 20;
  Status st = RetainFreedHeapMemory(too_big);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("32 MiB"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace parallax
