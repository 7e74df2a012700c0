// The run state rules every layer shares. The store enforces them (a terminal
// run never changes state again); the server reads them to answer and sweep.
#ifndef RUNREAPER_STORE_RUN_STATE_H_
#define RUNREAPER_STORE_RUN_STATE_H_

#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::store {

// True for FINISHED, STALE and CANCELLED: the states a run never leaves.
// False for RUNNING and UNSPECIFIED (and for any value not in the enum).
bool IsTerminal(::runreaper::v1::RunState state);

}  // namespace runreaper::store

#endif  // RUNREAPER_STORE_RUN_STATE_H_
