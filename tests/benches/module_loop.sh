#!/usr/bin/env bash
# Times the module author's loop: `wedge module new` -> `module build` -> `module deploy` to a
# running node, for two new crates in a row (the first may compile std and the SDK stack into
# the shared target dir, the second finds them there), then `wedge module test` of the
# second (a handler) on its own.
#   WEDGE=target/release/wedge tests/benches/module_loop.sh
# Environment: WEDGE (wedge on PATH), CARGO_TARGET_DIR (default: wedge's shared dir,
# ~/.cache/wedge/modules-target; set it to an empty directory to time a cold first build).
set -euo pipefail
WEDGE=$(realpath "${WEDGE:-$(command -v wedge)}")
work=$(mktemp -d)
trap 'kill "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; rm -rf "$work"' EXIT

"$WEDGE" run --data-dir "$work/data" >"$work/node.log" 2>&1 &
node=$!
for _ in $(seq 1 100); do
    "$WEDGE" module list --data-dir "$work/data" >/dev/null 2>&1 && break
    sleep 0.1
done

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

for name in loop-first loop-second; do
    t0=$(now)
    "$WEDGE" module new "$name" --kind twin-handler --dir "$work" >/dev/null
    t1=$(now)
    file=$("$WEDGE" module build "$work/$name" 2>"$work/$name.build.log")
    t2=$(now)
    "$WEDGE" module deploy "$file" --data-dir "$work/data" >/dev/null
    t3=$(now)
    echo "$name: new $(secs "$t0" "$t1") s, build $(secs "$t1" "$t2") s, deploy $(secs "$t2" "$t3") s, total $(secs "$t0" "$t3") s"
done

update='{"device":"default/thermo-1","property":"temperature","value":"120","type":"float"}'
t0=$(now)
"$WEDGE" module test "$file" --update "$update" >/dev/null
t1=$(now)
echo "module test of loop-second (one update): $(secs "$t0" "$t1") s"
