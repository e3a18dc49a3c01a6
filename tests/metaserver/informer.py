"""An informer built from the Python `kubernetes` client (v31), run against a MetaServer.

It does what client-go's reflector does, with the client's own list and watch calls: LIST once,
then WATCH from the list's resourceVersion; when a watch ends it watches again from the last
version it saw, and only a 410 Gone (or an error answer) makes it LIST again. Each event is
printed as a JSON line; the last line is a summary with how many LISTs and WATCHes it made,
so a relist storm shows as a count.

    python informer.py http://127.0.0.1:10550 <namespace> <seconds>
"""

import json
import sys
import time

from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def main():
    server, namespace, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    config = client.Configuration()
    config.host = server
    api = client.CoreV1Api(client.ApiClient(config))
    counts = {"lists": 0, "list_errors": 0, "watches": 0, "watch_errors": 0, "gone": 0, "events": 0, "bookmarks": 0}
    store = {}

    def say(**line):
        line["t"] = round(time.time(), 3)
        print(json.dumps(line), flush=True)

    def relist():
        while True:
            counts["lists"] += 1
            try:
                listed = api.list_namespaced_config_map(namespace, _request_timeout=15)
            except Exception as e:  # the server's or the connection's error
                counts["list_errors"] += 1
                say(kind="list_error", error=str(e)[:200])
                time.sleep(1)
                continue
            store.clear()
            for cm in listed.items:
                store[cm.metadata.name] = cm.data or {}
            say(kind="list", items=len(listed.items), rv=listed.metadata.resource_version)
            return listed.metadata.resource_version

    rv = relist()
    deadline = time.time() + seconds
    while time.time() < deadline:
        counts["watches"] += 1
        try:
            w = watch.Watch()
            for ev in w.stream(api.list_namespaced_config_map, namespace, resource_version=rv,
                               timeout_seconds=max(1, int(min(60, deadline - time.time()))),
                               allow_watch_bookmarks=True, _request_timeout=90):
                obj = ev["object"]
                if ev["type"] == "BOOKMARK":
                    # The client hands bookmarks over as the raw object.
                    rv = ev["raw_object"]["metadata"]["resourceVersion"]
                    counts["bookmarks"] += 1
                    continue
                rv = obj.metadata.resource_version
                counts["events"] += 1
                if ev["type"] == "DELETED":
                    store.pop(obj.metadata.name, None)
                else:
                    store[obj.metadata.name] = obj.data or {}
                say(kind="event", type=ev["type"], name=obj.metadata.name, data=obj.data, rv=rv)
        except ApiException as e:
            if e.status == 410:
                counts["gone"] += 1
                say(kind="gone")
                rv = relist()
            else:
                counts["watch_errors"] += 1
                say(kind="watch_error", status=e.status, error=str(e.reason)[:200])
                time.sleep(1)
        except Exception as e:
            counts["watch_errors"] += 1
            say(kind="watch_error", error=str(e)[:200])
            time.sleep(1)
    say(kind="summary", store=store, **counts)


if __name__ == "__main__":
    main()
