// The prefix of the translation units that use gRPC (targets that depend
// on @system//:grpc; its PCH is //base/pch:grpc): lib.h and the gRPC
// headers, which cost those files more than the rest of their headers.
#ifndef RUNREAPER_BASE_PCH_GRPC_H_
#define RUNREAPER_BASE_PCH_GRPC_H_

#include "base/pch/lib.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"

#endif  // RUNREAPER_BASE_PCH_GRPC_H_
