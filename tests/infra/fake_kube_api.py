"""A Kubernetes API server double on 127.0.0.1 that answers what Helm's `lookup` asks: discovery, and GET of
the Secrets and StatefulSets a test put there. With it the real Helm library renders the chart as an upgrade of a
release already in the cluster (helm_python.Config.render), so the templates' lookups see that release."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DISCOVERY: dict[str, dict[str, Any]] = {
    "/version": {"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
            }
        ],
    },
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "secrets",
                "singularName": "secret",
                "namespaced": True,
                "kind": "Secret",
                "verbs": ["get"],
            }
        ],
    },
    "/apis/apps/v1": {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [
            {
                "name": "statefulsets",
                "singularName": "statefulset",
                "namespaced": True,
                "kind": "StatefulSet",
                "verbs": ["get"],
            }
        ],
    },
}
PATHS = {
    "Secret": "/api/v1/namespaces/{namespace}/secrets/{name}",
    "StatefulSet": "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}",
}


class FakeKubeApi:
    def __init__(self, port: int) -> None:
        self.port = port
        self.objects: dict[str, dict[str, Any]] = {}

    def apply(self, manifest: dict[str, Any]) -> None:
        """Store a rendered Secret or StatefulSet as if `helm upgrade` had applied it."""
        metadata = manifest["metadata"]
        self.objects[PATHS[manifest["kind"]].format(**metadata)] = manifest

    @property
    def kubeconfig(self) -> str:
        return (
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f'clusters: [{{name: fake, cluster: {{server: "http://127.0.0.1:{self.port}"}}}}]\n'
            "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
            "users: [{name: fake, user: {token: not-a-secret}}]\n"
        )


@contextmanager
def fake_kube_api() -> Iterator[FakeKubeApi]:
    api = FakeKubeApi(0)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            found = DISCOVERY.get(path) or api.objects.get(path)
            body = found or {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "NotFound",
                "code": 404,
            }
            data = json.dumps(body).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
