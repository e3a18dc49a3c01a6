#!/usr/bin/env bash
# An informer (the Python `kubernetes` client, informer.py) against each MetaServer named on the
# command line, through a CloudCore outage of the cloud that ../shared/realcloud/up.sh started:
#   tests/metaserver/outage.sh http://127.0.0.1:10550 [http://127.0.0.1:10551 ...]
# Before the outage a ConfigMap is edited; during it (CloudCore stopped, the apiserver up) one is
# edited, one created and one deleted; then CloudCore is started again. Each informer's events go to
# $OUT/<port>.jsonl; the summary says how many LISTs/WATCHes each made and what its store holds.
# Env: CLOUD_MODULES for the restart (dynamicController), STATE (/tmp/realcloud), BIN (target/realcloud-bin), OUTAGE seconds (60), OUT (target/metaserver-outage),
# PY (target/pyk8s/bin/python: `python3 -m venv target/pyk8s && target/pyk8s/bin/pip install kubernetes==31.0.0`).
set -euo pipefail
cd "$(dirname "$0")/../.."
STATE=${STATE:-/tmp/realcloud}
BIN=${BIN:-target/realcloud-bin}
OUTAGE=${OUTAGE:-60}
OUT=${OUT:-target/metaserver-outage}
PY=${PY:-target/pyk8s/bin/python}
NS=informer-check
K() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
cm() { printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  v: "%s"\n' "$1" "$NS" "$2" | K apply -f - >/dev/null; }
stamp() { date +%s.%N; }

mkdir -p "$OUT"
K create namespace "$NS" >/dev/null 2>&1 || true
for n in a b c e; do cm "$n" 0; done
K -n "$NS" delete configmap f --ignore-not-found >/dev/null
total=$((OUTAGE + 100))
pids=()
for url in "$@"; do
  "$PY" tests/metaserver/informer.py "$url" "$NS" "$total" >"$OUT/${url##*:}.jsonl" 2>"$OUT/${url##*:}.err" &
  pids+=($!)
done
sleep 15
cm a 1
echo "edit before the outage: a=1 at $(stamp)"
sleep 5
down=$(stamp)
kill "$(cat "$STATE/cloudcore.pid")"
while kill -0 "$(cat "$STATE/cloudcore.pid")" 2>/dev/null; do sleep 0.2; done
echo "CloudCore stopped at $down"
sleep 5
cm b 2; cm f 1; K -n "$NS" delete configmap e >/dev/null
echo "during the outage: b=2, f created, e deleted at $(stamp)"
sleep $((OUTAGE - 5))
up=$(stamp)
CLOUD_MODULES=${CLOUD_MODULES:-dynamicController} BIN=$BIN STATE=$STATE bash ../shared/realcloud/up.sh >/dev/null 2>&1
echo "CloudCore restarted at $up (up.sh returned at $(stamp))"
for p in "${pids[@]}"; do wait "$p" || true; done
for url in "$@"; do
  f="$OUT/${url##*:}.jsonl"
  echo "== $url"
  python3 - "$f" "$up" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
up = float(sys.argv[2])
for l in lines:
    if l["kind"] == "event" and not l["name"].endswith(".crt"):
        print(f'  {l["type"]:8} {l["name"]} {l.get("data")} at restart{l["t"] - up:+.1f}s')
s = lines[-1]
print("  summary:", {k: s[k] for k in ("lists", "list_errors", "watches", "watch_errors", "gone", "events", "bookmarks")})
print("  final store:", {k: v for k, v in s["store"].items() if not k.endswith(".crt")})
PY
done
