#include "core/comm/rendezvous_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/testing/temp_dir.h"
#include "schemas/kv_keys.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;

void ExpectSetThenGet(RendezvousStore* store) {
  ASSERT_TRUE(store->Set("a/1", std::string("x\0y", 3)).ok());
  std::thread later([&] { ASSERT_TRUE(store->Set("a/2", "later").ok()); });
  auto got = store->Get({"a/1", "a/2"}, DeadlineAfter(milliseconds(10'000)));
  later.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value()[0], std::string("x\0y", 3));
  EXPECT_EQ(got.value()[1], "later");
}

void ExpectMissingKeyTimesOut(RendezvousStore* store) {
  auto start = std::chrono::steady_clock::now();
  auto got = store->Get({"never/there"}, DeadlineAfter(milliseconds(200)));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_NE(got.status().message().find("never/there"), std::string::npos)
      << got.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(RendezvousStoreTest, InMemorySetThenGet) {
  auto store = NewInMemoryRendezvousStore();
  ExpectSetThenGet(store.get());
}

TEST(RendezvousStoreTest, InMemoryMissingKeyTimesOut) {
  auto store = NewInMemoryRendezvousStore();
  ExpectMissingKeyTimesOut(store.get());
}

TEST(RendezvousStoreTest, FileSetThenGet) {
  parallax::testing::TempDir dir;
  auto store = NewFileRendezvousStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ExpectSetThenGet(store.value().get());
}

TEST(RendezvousStoreTest, FileMissingKeyTimesOut) {
  parallax::testing::TempDir dir;
  auto store = NewFileRendezvousStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ExpectMissingKeyTimesOut(store.value().get());
}

TEST(RendezvousStoreTest, FileStoreNeedsADirectory) {
  auto store = NewFileRendezvousStore("/nonexistent/parallax/dir");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
}

TEST(RendezvousStoreTest, CommKeyPrefixCarriesJobAndAttempt) {
  EXPECT_EQ(kv_keys::CommPrefix(7, 2), "job/7/2/comm");
}

}  // namespace
}  // namespace parallax::comm
