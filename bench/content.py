"""CPU cost of a document per content mode: the stream sink's filter, sanitize and YAML, per
object, for objects made by kubectl create, client-side and server-side apply on a real
control plane. Prints one JSON object per (kind, method). In-process and single-threaded, so
it is steadier than the end-to-end figures of bench/mirror.py on a shared machine.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from kubescribe.api.models import CONTROLLER_MANAGERS
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from kubescribe.mirror.owned import FULL, Content, keep_owned
from kubescribe.mirror.sanitize import sanitize
from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.controlplane import ControlPlane

METHODS = {
    "create": ("create", "-f", "-"),
    "csa": ("apply", "-f", "-"),
    "ssa": ("apply", "--server-side", "-f", "-"),
}


def objects(ns: str) -> list[dict[str, Any]]:
    labels = {"app": "web"}
    pod = {
        "containers": [
            {
                "name": "web",
                "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "env": [{"name": f"K{i}", "value": str(i)} for i in range(10)],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            },
            {"name": "side", "image": "busybox:1.37", "args": ["sleep", "infinity"]},
        ]
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": ns, "labels": {"bench": "yes"}},
            "data": {"v": "1"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "type": "NodePort",
                "selector": labels,
                "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
            },
        },
    ]


def document(obj: dict[str, Any], content: Content) -> str:
    """What `controller.streams.TargetStream` does per event, then the YAML the worker writes."""
    owned = keep_owned(obj, content).document if content.owned else None
    doc = sanitize(obj, owned)
    DEFAULT_NOISE_POLICY.strip(doc, obj)
    return dump_yaml(order_document(doc))


def per_object_us(obj: dict[str, Any], content: Content, rounds: int) -> float:
    best = float("inf")
    for _ in range(5):  # the best of five: the least disturbed by other work on the machine
        started = time.perf_counter()
        for _ in range(rounds):
            document(obj, content)
        best = min(best, (time.perf_counter() - started) / rounds)
    return best * 1e6


@click.command()
@click.option("--rounds", default=2000, show_default=True)
def main(rounds: int) -> None:
    owned = Content("Owned", CONTROLLER_MANAGERS)
    with tempfile.TemporaryDirectory(prefix="kubescribe-bench-") as tmp:
        cp = ControlPlane(workdir=Path(tmp))
        cp.start()
        try:
            for method, args in METHODS.items():
                cp.kubectl("create", "namespace", method)
                cp.kubectl(*args, input="\n---\n".join(json.dumps(o) for o in objects(method)))
                for obj in cp.get_json("cm,deploy,svc", "-n", method, "--show-managed-fields")[
                    "items"
                ]:
                    if obj["metadata"]["name"] == "kube-root-ca.crt":
                        continue
                    full = per_object_us(obj, FULL, rounds)
                    mine = per_object_us(obj, owned, rounds)
                    result = {
                        "kind": obj["kind"],
                        "method": method,
                        "full_us": round(full, 1),
                        "owned_us": round(mine, 1),
                        "owned_vs_full": round(mine / full, 2),
                        "full_lines": document(obj, FULL).count("\n"),
                        "owned_lines": document(obj, owned).count("\n"),
                    }
                    click.echo(json.dumps(result))
        finally:
            cp.stop()


if __name__ == "__main__":
    main()
