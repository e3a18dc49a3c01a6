#!/usr/bin/env bash
# Fleet density: N idle Wedge nodes (edged on, no pods) joined to one real CloudCore on this
# machine. Reports the time until every node is Ready with a fresh lease, each node's memory
# (RSS, PSS, private) and the idle CPU of all nodes together, as one markdown table row.
#
#   N=100 tests/benches/fleet.sh                 # WEDGE defaults to target/release/wedge, else debug
#   N=200 WEDGE=target/debug/wedge IDLE=60 tests/benches/fleet.sh
#
# Environment: N (20), WEDGE, IDLE (seconds of idle CPU measured, 60), SETTLE (seconds after all
# Ready before measuring, 30), WORK (scratch, /tmp/wedge-fleet), REALCLOUD (../shared/realcloud),
# READY_TIMEOUT (seconds, 600). The cloud is started here (its own STATE under WORK) and stopped
# at the end, with every node.
#
# Each node gets its own name (fleet-<i>), data dir, MQTT port, admin port and DMI socket; its
# kubelet port is off (`readOnlyPort: 0`: N nodes cannot share 10350; logs/exec still reach
# edged through edgeStream), image GC and disk eviction are relaxed (this VM's disk reads ~85 %
# used, and N nodes collecting the local-only test images would delete them).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-20}
IDLE=${IDLE:-60}
SETTLE=${SETTLE:-30}
WORK=${WORK:-/tmp/wedge-fleet}
REALCLOUD=${REALCLOUD:-$REPO/../shared/realcloud}
READY_TIMEOUT=${READY_TIMEOUT:-600}
if [[ -z ${WEDGE:-} ]]; then
  WEDGE=$REPO/target/release/wedge
  [[ -x $WEDGE ]] || WEDGE=$REPO/target/debug/wedge
fi
[[ -x $WEDGE ]] || { echo "no wedge binary at $WEDGE (cargo build -p wedge)" >&2; exit 1; }
export STATE=$WORK/cloud
export BIN=${BIN:-$REPO/target/realcloud-bin}
K() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
say() { printf '[fleet %s] %s\n' "$(date +%T)" "$*" >&2; }

stop_all() {
  say "stopping $N nodes and the cloud"
  for pidfile in "$WORK"/node-*/wedge.pid; do
    [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 2
  "$REALCLOUD/down.sh" --wipe >/dev/null 2>&1 || true
}
trap stop_all EXIT

rm -rf "$WORK"; mkdir -p "$WORK"
say "starting the cloud"
"$REALCLOUD/up.sh" >"$WORK/up.log" 2>&1
TOKEN=$(cat "$STATE/token")

say "starting $N nodes ($WEDGE)"
started=$(date +%s.%N)
for i in $(seq 1 "$N"); do
  dir=$WORK/node-$i
  mkdir -p "$dir/certs" "$dir/data" "$dir/kubelet"
  cat >"$dir/edgecore.yaml" <<YAML
apiVersion: edgecore.config.kubeedge.io/v1alpha2
kind: EdgeCore
modules:
  edgeHub:
    enable: true
    tlsCaFile: $dir/certs/rootCA.crt
    tlsCertFile: $dir/certs/server.crt
    tlsPrivateKeyFile: $dir/certs/server.key
    websocket:
      enable: true
      server: 127.0.0.1:${CLOUDHUB_PORT:-10000}
    httpServer: https://127.0.0.1:${CLOUDHUB_HTTPS_PORT:-10002}
    token: "$TOKEN"
  eventBus:
    mqttServerInternal: tcp://127.0.0.1:$((20000 + i))
    mqttServerExternal: tcp://127.0.0.1:$((20000 + i))
  edged:
    enable: true
    hostnameOverride: fleet-$i
    podSandboxImage: wedge-test/pause:1
    rootDirectory: $dir/kubelet
    tailoredKubeletConfig:
      readOnlyPort: 0
      imageGCHighThresholdPercent: 100
      imageGCLowThresholdPercent: 99
      evictionHard: {memory.available: 100Mi, nodefs.available: 5%, imagefs.available: 5%}
  deviceTwin:
    enable: true
    dmiSockPath: $dir/dmi.sock
wedge:
  adminAddr: 127.0.0.1:$((30000 + i))
YAML
  RUST_LOG=${RUST_LOG:-warn} nohup "$WEDGE" run --config "$dir/edgecore.yaml" --data-dir "$dir/data" \
    >"$dir/wedge.log" 2>&1 &
  echo $! >"$dir/wedge.pid"
done

# Every node Ready, and every lease renewed within the last 40 s.
fresh_and_ready() {
  local now ready leases
  ready=$(K get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null \
    | awk '$1 ~ /^fleet-/ && $2 == "True"' | wc -l)
  now=$(date +%s)
  leases=$(K -n kube-node-lease get leases -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.spec.renewTime}{"\n"}{end}' 2>/dev/null \
    | awk -v now="$now" '$1 ~ /^fleet-/ { cmd = "date -d " $2 " +%s"; cmd | getline t; close(cmd); if (now - t < 40) n++ } END { print n + 0 }')
  echo "$ready $leases"
}
deadline=$(( $(date +%s) + READY_TIMEOUT ))
while :; do
  read -r ready leases < <(fresh_and_ready)
  if (( ready == N && leases == N )); then break; fi
  if (( $(date +%s) > deadline )); then
    say "not met after ${READY_TIMEOUT}s: $ready/$N Ready, $leases/$N fresh leases"
    break
  fi
  sleep 2
done
all_ready=$(echo "$(date +%s.%N) - $started" | bc)
say "all Ready with fresh leases: $ready/$N, $leases/$N after ${all_ready}s; settling ${SETTLE}s"
sleep "$SETTLE"

pids=$(cat "$WORK"/node-*/wedge.pid)
alive=0; rss=0; pss=0; priv=0
for p in $pids; do
  [[ -r /proc/$p/smaps_rollup ]] || continue
  alive=$((alive + 1))
  read -r r s q < <(awk '/^Rss:/ {r=$2} /^Pss:/ {s=$2} /^Private_(Clean|Dirty):/ {q+=$2} END {print r, s, q}' "/proc/$p/smaps_rollup")
  rss=$((rss + r)); pss=$((pss + s)); priv=$((priv + q))
done
cpu() { for p in $pids; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0; done | awk '{s+=$1} END {print s}'; }
c1=$(cpu); sleep "$IDLE"; c2=$(cpu)
tck=$(getconf CLK_TCK)
idle_pct=$(echo "scale=2; 100 * ($c2 - $c1) / $tck / $IDLE" | bc)
read -r ready leases < <(fresh_and_ready)
say "after the idle window: $ready/$N Ready, $leases/$N fresh leases"
echo "| nodes | all Ready, leases < 40 s | per node RSS / PSS / private (MB) | idle CPU of all nodes (% of a core) | Ready / fresh after idle |"
echo "|---|---|---|---|---|"
printf '| %s | %.1f s | %.1f / %.1f / %.1f | %s %% | %s / %s |\n' "$N" "$all_ready" \
  "$(echo "scale=1; $rss / $alive / 1024" | bc)" "$(echo "scale=1; $pss / $alive / 1024" | bc)" \
  "$(echo "scale=1; $priv / $alive / 1024" | bc)" "$idle_pct" "$ready" "$leases"
