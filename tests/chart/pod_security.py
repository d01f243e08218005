"""The Pod Security Standards (baseline + restricted, Kubernetes v1.30+) as a table of checks over a pod spec.

Source: https://kubernetes.io/docs/concepts/security/pod-security-standards/ — one entry per control, named as
there. ``violations(pod_spec, metadata)`` returns ``"control: where: what"`` strings; empty means the pod would be
admitted in a namespace labelled ``pod-security.kubernetes.io/enforce: restricted``.
"""

from __future__ import annotations

from typing import Callable, Iterator

BASELINE_CAPS = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _containers(spec: dict) -> Iterator[tuple[str, dict]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            yield f"{field}[{c.get('name')}]", c


def _sc(c: dict) -> dict:
    return c.get("securityContext") or {}


def _host_process(spec, md):
    if ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess"):
        yield "spec.securityContext.windowsOptions.hostProcess is true"
    for where, c in _containers(spec):
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess"):
            yield f"{where}: windowsOptions.hostProcess is true"


def _host_namespaces(spec, md):
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(f):
            yield f"spec.{f} is true"


def _privileged(spec, md):
    for where, c in _containers(spec):
        if _sc(c).get("privileged"):
            yield f"{where}: privileged"


def _baseline_caps(spec, md):
    for where, c in _containers(spec):
        extra = set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPS
        if extra:
            yield f"{where}: adds {sorted(extra)}"


def _host_path(spec, md):
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            yield f"volume {v.get('name')}: hostPath"


def _host_ports(spec, md):
    for where, c in _containers(spec):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                yield f"{where}: hostPort {p['hostPort']}"


def _apparmor(spec, md):
    profiles = [("spec", (spec.get("securityContext") or {}).get("appArmorProfile"))]
    profiles += [(w, _sc(c).get("appArmorProfile")) for w, c in _containers(spec)]
    for where, prof in profiles:
        if prof and prof.get("type") not in ("RuntimeDefault", "Localhost"):
            yield f"{where}: appArmorProfile {prof.get('type')}"
    for key, value in ((md or {}).get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            yield f"annotation {key}: {value}"


def _selinux(spec, md):
    opts = [("spec", (spec.get("securityContext") or {}).get("seLinuxOptions"))]
    opts += [(w, _sc(c).get("seLinuxOptions")) for w, c in _containers(spec)]
    for where, o in opts:
        if not o:
            continue
        if o.get("type", "") not in SELINUX_TYPES:
            yield f"{where}: seLinuxOptions.type {o.get('type')}"
        if o.get("user") or o.get("role"):
            yield f"{where}: seLinuxOptions user/role set"


def _proc_mount(spec, md):
    for where, c in _containers(spec):
        if _sc(c).get("procMount") not in (None, "Default"):
            yield f"{where}: procMount {_sc(c)['procMount']}"


def _seccomp_baseline(spec, md):
    profiles = [("spec", (spec.get("securityContext") or {}).get("seccompProfile"))]
    profiles += [(w, _sc(c).get("seccompProfile")) for w, c in _containers(spec)]
    for where, prof in profiles:
        if prof and prof.get("type") == "Unconfined":
            yield f"{where}: seccompProfile Unconfined"


def _sysctls(spec, md):
    for s in (spec.get("securityContext") or {}).get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            yield f"sysctl {s.get('name')}"


def _volume_types(spec, md):
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"volume {v.get('name')}: {sorted(kinds - RESTRICTED_VOLUMES)}"


def _privilege_escalation(spec, md):
    for where, c in _containers(spec):
        if _sc(c).get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"


def _non_root(spec, md):
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    for where, c in _containers(spec):
        value = _sc(c).get("runAsNonRoot", pod)
        if value is not True:
            yield f"{where}: runAsNonRoot is not true (pod or container)"


def _non_root_user(spec, md):
    if (spec.get("securityContext") or {}).get("runAsUser") == 0:
        yield "spec.securityContext.runAsUser is 0"
    for where, c in _containers(spec):
        if _sc(c).get("runAsUser") == 0:
            yield f"{where}: runAsUser is 0"


def _seccomp_restricted(spec, md):
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    for where, c in _containers(spec):
        value = (_sc(c).get("seccompProfile") or {}).get("type", pod)
        if value not in ("RuntimeDefault", "Localhost"):
            yield f"{where}: seccompProfile.type is {value} (pod or container must be RuntimeDefault/Localhost)"


def _restricted_caps(spec, md):
    for where, c in _containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{where}: capabilities.drop lacks ALL"
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            yield f"{where}: adds {sorted(extra)}"


Check = Callable[[dict, dict], Iterator[str]]
BASELINE: list[tuple[str, Check]] = [
    ("HostProcess", _host_process),
    ("Host Namespaces", _host_namespaces),
    ("Privileged Containers", _privileged),
    ("Capabilities", _baseline_caps),
    ("HostPath Volumes", _host_path),
    ("Host Ports", _host_ports),
    ("AppArmor", _apparmor),
    ("SELinux", _selinux),
    ("/proc Mount Type", _proc_mount),
    ("Seccomp", _seccomp_baseline),
    ("Sysctls", _sysctls),
]
RESTRICTED: list[tuple[str, Check]] = BASELINE + [
    ("Volume Types", _volume_types),
    ("Privilege Escalation", _privilege_escalation),
    ("Running as Non-root", _non_root),
    ("Running as Non-root user", _non_root_user),
    ("Seccomp (restricted)", _seccomp_restricted),
    ("Capabilities (restricted)", _restricted_caps),
]


def violations(pod_spec: dict, metadata: dict | None = None, profile=RESTRICTED) -> list[str]:
    return [f"{name}: {msg}" for name, check in profile for msg in check(pod_spec, metadata or {})]
