#include "server/daemon_log.h"

#include "base/log.h"

namespace runreaper::server {

void LogLine(absl::string_view message) { LogInfo(message); }

}  // namespace runreaper::server
