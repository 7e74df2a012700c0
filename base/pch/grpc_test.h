// The prefix of the test translation units that use gRPC (its PCH is
// //base/pch:grpc_test): grpc.h and GoogleTest.
#ifndef RUNREAPER_BASE_PCH_GRPC_TEST_H_
#define RUNREAPER_BASE_PCH_GRPC_TEST_H_

#include "base/pch/grpc.h"
#include "gtest/gtest.h"

#endif  // RUNREAPER_BASE_PCH_GRPC_TEST_H_
