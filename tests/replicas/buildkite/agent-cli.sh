#!/usr/bin/env bash
# Stand-in for the `buildkite-agent env dump` the hook wrapper runs
# (internal/job/hook/wrapper.go:60-67; clicommand/env_dump.go prints the
# environment as JSON): here one NUL-terminated KEY=VALUE per variable.
# Only `env dump` is replayed.
if [ "${1:-} ${2:-}" = "env dump" ]; then env -0; exit 0; fi
echo "agent-cli.sh: only 'env dump' is replayed" >&2
exit 1
