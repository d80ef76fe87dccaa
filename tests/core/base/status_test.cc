#include "parallax/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace parallax {
namespace {

class StatusTest : public ::testing::Test {
 protected:
  static StatusOr<int> Half(int x) {
    if (x % 2 != 0) return InvalidArgument("odd: " + std::to_string(x));
    return x / 2;
  }
  // Halves twice with PX_ASSIGN_OR_RETURN; `*reached_end` says whether it got past both.
  static StatusOr<int> Quarter(int x, bool* reached_end) {
    PX_ASSIGN_OR_RETURN(int h, Half(x));
    PX_ASSIGN_OR_RETURN(int q, Half(h));
    *reached_end = true;
    return q;
  }
  static Status FailIfNegative(int x) {
    if (x < 0) return InvalidArgument("negative");
    return Status::Ok();
  }
  static Status Both(int a, int b, int* checked) {
    PX_RETURN_IF_ERROR(FailIfNegative(a));
    ++*checked;
    PX_RETURN_IF_ERROR(FailIfNegative(b));
    ++*checked;
    return Status::Ok();
  }
};

TEST_F(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST_F(StatusTest, ToStringHasCodeNameAndMessage) {
  EXPECT_EQ(NotFound("job 7 does not exist").ToString(), "NOT_FOUND: job 7 does not exist");
  EXPECT_EQ(IoError("disk").ToString(), "IO_ERROR: disk");
  EXPECT_EQ(InvalidArgument("x").code(), StatusCode::kInvalidArgument);
}

TEST_F(StatusTest, EveryCodeHasAName) {
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_EQ(StatusCodeName(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(StatusCodeName(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_EQ(StatusCodeName(StatusCode::kFailedPrecondition), "FAILED_PRECONDITION");
  EXPECT_EQ(StatusCodeName(StatusCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
  EXPECT_EQ(StatusCodeName(StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(StatusCode::kPermissionDenied), "PERMISSION_DENIED");
  EXPECT_EQ(StatusCodeName(StatusCode::kAborted), "ABORTED");
  EXPECT_EQ(StatusCodeName(StatusCode::kInternal), "INTERNAL");
  EXPECT_EQ(StatusCodeName(StatusCode::kIoError), "IO_ERROR");
}

TEST_F(StatusTest, WithContextPrefixesTheMessageAndKeepsTheCode) {
  Status s = Unavailable("connection refused").WithContext("coordinator 'h:1'");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "coordinator 'h:1': connection refused");
  // Context is not invented for success.
  Status ok = Status::Ok().WithContext("ignored");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
}

TEST_F(StatusTest, StatusOrHoldsAValueOrAStatus) {
  StatusOr<std::string> v(std::string("abc"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "abc");
  EXPECT_EQ(v->size(), 3u);
  EXPECT_TRUE(v.status().ok());

  StatusOr<std::string> e(DeadlineExceeded("late"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(e.status().message(), "late");
}

TEST_F(StatusTest, StatusOrMovesOutMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> p(std::make_unique<int>(5));
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 5);
}

TEST_F(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  bool reached_end = false;
  StatusOr<int> q = Quarter(12, &reached_end);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, 3);
  EXPECT_TRUE(reached_end);

  reached_end = false;
  StatusOr<int> bad = Quarter(6, &reached_end);  // 6 -> 3, then 3 is odd
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "odd: 3");
  EXPECT_FALSE(reached_end);
}

TEST_F(StatusTest, ReturnIfErrorStopsAtTheFirstFailure) {
  int checked = 0;
  EXPECT_TRUE(Both(1, 2, &checked).ok());
  EXPECT_EQ(checked, 2);
  checked = 0;
  Status s = Both(-1, 2, &checked);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(checked, 0);
  checked = 0;
  EXPECT_FALSE(Both(1, -2, &checked).ok());
  EXPECT_EQ(checked, 1);
}

}  // namespace
}  // namespace parallax
