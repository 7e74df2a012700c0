// runreaperd's log lines: LogLine(m) is LogInfo(m) of base/log.h.
#ifndef RUNREAPER_SERVER_DAEMON_LOG_H_
#define RUNREAPER_SERVER_DAEMON_LOG_H_

#include <string>

#include "absl/strings/string_view.h"

namespace runreaper::server {

// One INFO line through base/log.h (escaped, one write(2)).
void LogLine(absl::string_view message);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_LOG_H_
