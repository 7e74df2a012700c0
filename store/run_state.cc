#include "store/run_state.h"

namespace runreaper::store {

bool IsTerminal(::runreaper::v1::RunState state) {
  return state == ::runreaper::v1::RUN_STATE_FINISHED ||
         state == ::runreaper::v1::RUN_STATE_STALE || state == ::runreaper::v1::RUN_STATE_CANCELLED;
}

}  // namespace runreaper::store
