#include "server/rpc/request_errors.h"

#include "gtest/gtest.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {
namespace {

// The generated descriptors are linked in (the messages are used).
const runreaper::v1::RegisterRunRequest kLinked;

TEST(DescribeParseFailureTest, NamesAStringFieldOfTheRequest) {
  EXPECT_EQ(
      DescribeParseFailure("/runreaper.v1.Reconciler/GetRun", "runreaper.v1.GetRunRequest.run_id"),
      "run_id: not valid UTF-8 (a string field must hold UTF-8)");
}

TEST(DescribeParseFailureTest, NamesAMapKeyOrValue) {
  EXPECT_EQ(DescribeParseFailure("/runreaper.v1.Reconciler/RegisterRun",
                                 "runreaper.v1.RegisterRunRequest.LabelsEntry.value"),
            "labels (value): not valid UTF-8 (a string field must hold UTF-8)");
  EXPECT_EQ(DescribeParseFailure("/runreaper.v1.Reconciler/ListRuns",
                                 "runreaper.v1.ListRunsRequest.LabelSelectorEntry.key"),
            "label_selector (key): not valid UTF-8 (a string field must hold UTF-8)");
}

TEST(DescribeParseFailureTest, AFieldOfAnotherTypeIsNotNamed) {
  EXPECT_EQ(DescribeParseFailure("/runreaper.v1.Reconciler/GetRun",
                                 "runreaper.v1.RegisterRunRequest.run_id"),
            "request is not valid: a string field holds invalid UTF-8");
  EXPECT_EQ(DescribeParseFailure("/runreaper.v1.Reconciler/GetRun", "runreaper.v1.GetRunRequest."),
            "request is not valid: a string field holds invalid UTF-8");
}

TEST(DescribeParseFailureTest, BytesThatAreNoMessage) {
  EXPECT_EQ(DescribeParseFailure("/runreaper.v1.Reconciler/WatchEvents", ""),
            "request is not a valid runreaper.v1.WatchEventsRequest message");
  EXPECT_EQ(DescribeParseFailure("/no.Such/Method", ""), "request could not be parsed");
  EXPECT_EQ(DescribeParseFailure("garbage", ""), "request could not be parsed");
}

}  // namespace
}  // namespace runreaper::server
