#!/usr/bin/env bash
# Whole-cluster timings of one node on the real cloud of ../shared/realcloud started with
# CONTROLLERS=1 (kube-scheduler + kube-controller-manager): a Deployment of N replicas to all
# Running, a DaemonSet's pod Ready, a Job to completion, the node NotReady after its process is
# killed and Ready again after a restart, and a pod with tolerationSeconds evicted while it is
# away. Printed, never judged. Run it once per node kind on the same cloud:
#   CONTROLLERS=1 ../shared/realcloud/up.sh
#   tests/benches/cluster_table.sh wedge-bench "<start command>" "<kill command>"
#   tests/benches/cluster_table.sh edgecore-ref "../shared/realcloud/reference-edgecore.sh" \
#       'kill -9 $(cat /tmp/realcloud-edgecore-ref/edgecore.pid)'
# The start command must (re)start the node with its state kept; the kill command must kill
# its process as a crash would.
set -euo pipefail
NODE=$1; START=$2; KILL=$3; N=${N:-20}
K=${KUBECTL:-$HOME/.cache/wedge-realcloud/bin/kubectl}
export KUBECONFIG=${KUBECONFIG:-/tmp/realcloud/admin.kubeconfig}
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc | xargs printf '%.1f'; }
until_true() { # until_true TIMEOUT_S CMD...: polls CMD every 0.2 s
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || { echo "timed out: $*" >&2; return 1; }
    sleep 0.2
  done
}
ready_is() { [[ $($K get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == "$1" ]]; }
count_phase() { $K get pods -l "app=$1" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c "^$2$" || true; }
all_running() { [[ $(count_phase "$1" Running) -ge $2 ]]; }
ds_ready() { [[ $($K get ds "$1" -o jsonpath='{.status.numberReady}') == 1 ]]; }
job_done() { [[ $($K get job "$1" -o jsonpath='{.status.succeeded}') == 1 ]]; }
marked_for_deletion() { [[ -n $($K get pod "$1" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null) ]]; }
tag=$(date +%s)
common="nodeSelector: {kubernetes.io/hostname: $NODE}
      terminationGracePeriodSeconds: 1"
ctr='- {name: app, image: wedge-test/busybox:1, imagePullPolicy: Never, command: [sleep, "3600"]}'

until_true 120 ready_is True
t=$(now)
$K apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: d$tag}
spec:
  replicas: $N
  selector: {matchLabels: {app: d$tag}}
  template:
    metadata: {labels: {app: d$tag}}
    spec:
      $common
      containers:
      $ctr
YAML
until_true 300 all_running "d$tag" "$N"; echo "$NODE deployment_${N}_running_s $(since "$t")"
$K delete deploy "d$tag" --wait=false >/dev/null

t=$(now)
$K apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds$tag}
spec:
  selector: {matchLabels: {app: ds$tag}}
  template:
    metadata: {labels: {app: ds$tag}}
    spec:
      $common
      containers:
      $ctr
YAML
until_true 120 ds_ready "ds$tag"; echo "$NODE daemonset_ready_s $(since "$t")"
$K delete ds "ds$tag" --wait=false >/dev/null

t=$(now)
$K apply -f - >/dev/null <<YAML
apiVersion: batch/v1
kind: Job
metadata: {name: j$tag}
spec:
  template:
    spec:
      $common
      restartPolicy: Never
      containers:
      - {name: work, image: wedge-test/busybox:1, imagePullPolicy: Never, command: [sh, -c, "echo done"]}
YAML
until_true 120 job_done "j$tag"; echo "$NODE job_complete_s $(since "$t")"
$K delete job "j$tag" --wait=false >/dev/null

# A pod that tolerates the node's absence for 10 s, then the node killed.
$K apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: e$tag}
spec:
  nodeSelector: {kubernetes.io/hostname: $NODE}
  terminationGracePeriodSeconds: 1
  tolerations:
  - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 10}
  containers:
  $ctr
YAML
until_true 120 bash -c "[[ \$($K get pod e$tag -o jsonpath='{.status.phase}') == Running ]]"
sleep 12 # the lease renewed since the pod started
t=$(now)
bash -c "$KILL"
until_true 180 ready_is Unknown; echo "$NODE notready_after_kill_s $(since "$t")"
until_true 180 marked_for_deletion "e$tag"; echo "$NODE tolerating_pod_evicted_after_kill_s $(since "$t")"
t=$(now)
bash -c "$START" >/dev/null
until_true 180 ready_is True; echo "$NODE ready_after_restart_s $(since "$t")"
until_true 120 bash -c "! $K get pod e$tag >/dev/null 2>&1"; echo "$NODE evicted_pod_gone_after_restart_s $(since "$t")"
