#!/usr/bin/env bash
# The translation half of the main job (see scripts/demo.sh).
set -euo pipefail
DEMO=translation exec bash "$(dirname "$0")/demo.sh"
