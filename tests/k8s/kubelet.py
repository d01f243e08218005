"""What kubelet gives a container of a pod template, made on the local machine: the API server has no kubelet.

A process started with ``PodFiles.env`` and reading the files under ``root`` sees what the container would see:
its ConfigMap volumes, its projected ServiceAccount tokens (issued by the API server's TokenRequest API for the template's
ServiceAccount, audience and expiry as the template asks), the cluster CA of ``kube-root-ca.crt``, an optional
Secret that does not exist as an empty directory, the downward-API variables and ``KUBERNETES_SERVICE_HOST/PORT``.
Environment values that name a file under a mount are moved under ``root``; ``path`` does the same for any other
in-container path (a default compiled into the program).
"""

from __future__ import annotations

import pathlib
import time
import urllib.parse
from dataclasses import dataclass, field

CONFIG_MAP_WAIT = 30.0  # seconds a missing ConfigMap volume is waited for


@dataclass
class PodFiles:
    root: pathlib.Path
    mounts: dict[str, pathlib.Path] = field(default_factory=dict)  # mountPath in the container -> local directory
    env: dict[str, str] = field(default_factory=dict)

    def path(self, in_container: str) -> str:
        """The local file standing for ``in_container`` (unchanged when no mount holds it)."""
        for mount, local in sorted(self.mounts.items(), key=lambda m: -len(m[0])):
            if in_container == mount or in_container.startswith(mount.rstrip("/") + "/"):
                return str(local / in_container[len(mount) :].lstrip("/"))
        return in_container


def token_request(env, namespace: str, service_account: str, audience: str | None, seconds: int) -> str:
    spec = {"expirationSeconds": seconds, **({"audiences": [audience]} if audience else {})}
    status, out = env.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    if status != 201:
        raise RuntimeError(f"TokenRequest for {namespace}/{service_account}: {status} {out}")
    return out["status"]["token"]


def start_container(
    env, namespace: str, pod_name: str, template: dict, root: pathlib.Path, container: int = 0
) -> PodFiles:
    """The files and environment of ``template``'s container ``container`` as pod ``pod_name`` would get them."""
    spec = template["spec"]
    ctr = spec["containers"][container]
    service_account = spec.get("serviceAccountName") or "default"
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    files = PodFiles(root)
    for mount in ctr.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        local = root / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        files.mounts[mount["mountPath"]] = local
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                (local / sat["path"]).write_text(
                    token_request(
                        env, namespace, service_account, sat.get("audience"), sat.get("expirationSeconds", 3600)
                    )
                )
            elif (source.get("configMap") or {}).get("name") == "kube-root-ca.crt":
                for item in source["configMap"].get("items") or [{"key": "ca.crt", "path": "ca.crt"}]:
                    (local / item["path"]).write_bytes(env.ca_file.read_bytes())
            else:
                raise NotImplementedError(f"projected source {source}")
        config_map = volume.get("configMap")
        if config_map is not None:
            path = f"/api/v1/namespaces/{namespace}/configmaps/{config_map['name']}"
            deadline = time.monotonic() + CONFIG_MAP_WAIT
            while (got := env.request("GET", path))[0] == 404 and time.monotonic() < deadline:
                time.sleep(0.1)  # kubelet, too, waits for a ConfigMap applied after the workload that mounts it
            status, out = got
            if status != 200:
                raise RuntimeError(f"ConfigMap {config_map['name']}: {status}: the pod would not start")
            for key, text in (out.get("data") or {}).items():
                (local / key).write_text(text)
        secret = volume.get("secret")
        if secret is not None:
            status, out = env.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{secret['secretName']}")
            if status == 200:
                raise NotImplementedError("a Secret volume whose Secret exists")
            if not secret.get("optional"):
                raise RuntimeError(
                    f"Secret {secret['secretName']} is missing and not optional: the pod would not start"
                )
    server = urllib.parse.urlsplit(env.server)
    files.env.update(KUBERNETES_SERVICE_HOST=server.hostname, KUBERNETES_SERVICE_PORT=str(server.port))
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace, "spec.serviceAccountName": service_account}
    for var in ctr.get("env") or []:
        if "fieldRef" in (var.get("valueFrom") or {}):
            files.env[var["name"]] = downward[var["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "valueFrom" in var:
            raise NotImplementedError(f"env {var}")
        else:  # the API server drops an empty value
            value = var.get("value", "")
            files.env[var["name"]] = files.path(value) if value.startswith("/") else value
    return files
