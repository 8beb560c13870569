#!/usr/bin/env bash
# Miniflare's workerd (MINIFLARE_WORKERD_PATH) with V8 flags (workerd-v8-flags.ts says why): the
# real workerd (ZL_WORKERD_PATH) reads its binary config, which Miniflare writes to stdin, as
# workerd-v8-flags.ts rewrites it (Config.v8Flags = ZL_WORKERD_V8_FLAGS). The rewrite runs to its
# end first, into a file that workerd then reads (a filter process left running beside it would be
# workerd's child, never reaped); `exec`: the process Miniflare started, and stops, is workerd.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
config="$(mktemp "${TMPDIR:-/tmp}/zl-workerd-config.XXXXXX")"
(cd "$root" && exec node --import tsx infra/local/workerd-v8-flags.ts) > "$config"
exec < "$config"
rm -f "$config"
exec "$ZL_WORKERD_PATH" "$@"
