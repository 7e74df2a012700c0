#!/usr/bin/env bash
# The alert rules are valid and behave as their unit tests say
# (promtool from Debian's prometheus package; tools/install-deps.sh).
set -euo pipefail
cd deploy/prometheus  # the runfiles root is the working directory
promtool check rules runreaper-rules.yml
promtool test rules runreaper-rules.test.yml
