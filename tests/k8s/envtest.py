"""A real kube-apiserver backed by etcd on loopback ports: the same shape as controller-runtime's envtest.

The binaries come from ``envtest/build.sh`` (built from Go modules once, then cached). ``Environment`` generates a
CA, a serving certificate, a ServiceAccount signing key and an admin token, starts etcd and kube-apiserver on free
127.0.0.1 ports, waits for ``/readyz`` and writes an admin kubeconfig. Further identities:

- ``kubeconfig_for(user, groups)``: a client certificate signed by the cluster CA (CN=user, O=groups), issued at
  any time, for any user name, including ``system:serviceaccount:<ns>:<name>``;
- ``service_account_kubeconfig(namespace, name)``: a real ServiceAccount token from the TokenRequest API, so a
  process runs with exactly the RBAC bound to that ServiceAccount.

There is no kube-controller-manager, scheduler or kubelet: no garbage collector, no namespace deletion, no pods
running. Every request is written to an audit log (``audit_events()``) so tests can assert, for example, that a
ServiceAccount was never refused.

Command line (backs ``make envtest-up`` / ``make envtest-down``)::

    python -m tests.k8s.envtest up   [--dir .envtest]   # background; writes .envtest/kubeconfig (admin)
    python -m tests.k8s.envtest down [--dir .envtest]   # stops both processes, removes their data

Only the standard library and ``cryptography`` are needed here, so ``make envtest-up`` works without the test extras.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Iterable

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "envtest" / "build.sh"
ADMIN_USER = "envtest-admin"
ADMIN_GROUPS = ("system:masters",)
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# Metadata of every request; RequestReceived is dropped so each request appears once (at ResponseComplete).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


class EnvtestUnavailable(RuntimeError):
    """The binaries cannot be built or found (no Go toolchain, no module proxy)."""


def binaries_dir(*, build: bool = True) -> pathlib.Path:
    """``SPECDECODE_ENVTEST_BIN`` if set, else the directory ``envtest/build.sh`` prints (a cache hit is instant).
    ``build=False``: never start the first build (about 10 minutes on 2 cores), report it missing instead."""
    if os.environ.get("SPECDECODE_ENVTEST_BIN"):
        path = pathlib.Path(os.environ["SPECDECODE_ENVTEST_BIN"])
    else:
        env = dict(os.environ)
        if not build:
            env["SPECDECODE_ENVTEST_NO_BUILD"] = "1"
        try:
            done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=3600, env=env)
        except OSError as e:
            raise EnvtestUnavailable(f"cannot run {BUILD}: {e}") from e
        if done.returncode != 0:
            raise EnvtestUnavailable(f"{BUILD} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        path = pathlib.Path(done.stdout.strip().splitlines()[-1])
    for name in ("kube-apiserver", "etcd"):
        if not os.access(path / name, os.X_OK):
            raise EnvtestUnavailable(f"{path / name} is missing or not executable")
    return path


PORT_ATTEMPTS = 3  # starts of etcd + kube-apiserver before a lost port race is an error


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------------- certificates
class CertificateAuthority:
    """The cluster CA: signs the API server's serving certificate and every client certificate."""

    def __init__(self, name: str = "envtest-ca"):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._oid = x509, hashes, ec, NameOID
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding

        return self.cert.public_bytes(Encoding.PEM)

    def issue(
        self, common_name: str, organizations: Iterable[str] = (), *, server: bool = False
    ) -> tuple[bytes, bytes]:
        """A leaf certificate and its key (PEM). Client: CN is the user name, O the groups (how the API server reads
        them). Server: valid for 127.0.0.1 and localhost."""
        import ipaddress

        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        x509, oid = self._x509, self._oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        attrs = [x509.NameAttribute(oid.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(oid.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, self._hashes.SHA256())
        key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        return cert.public_bytes(Encoding.PEM), key_pem


def _rsa_key_pem() -> bytes:
    """The ServiceAccount token signing key (RS256, what kube-apiserver signs tokens with by default)."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(Encoding.PEM, PrivateFormat.TraditionalOpenSSL, NoEncryption())


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, so a killed test run leaves no servers."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------------------------------------------- environment
class Environment:
    """etcd + kube-apiserver on loopback; a context manager. ``workdir`` defaults to a fresh temporary directory,
    removed on exit with everything in it (etcd data, certificates, logs, kubeconfigs)."""

    def __init__(
        self,
        bin_dir: str | os.PathLike | None = None,
        workdir: str | os.PathLike | None = None,
        *,
        start_timeout: float = 60.0,
        extra_apiserver_args: Iterable[str] = (),
        build: bool = True,
    ):
        self.bin_dir = pathlib.Path(bin_dir) if bin_dir else None
        self.build = build
        self._own_workdir = workdir is None
        self.workdir = pathlib.Path(workdir) if workdir else None
        self.start_timeout = start_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.server = ""
        self.admin_token = ""
        self.kubeconfig: pathlib.Path | None = None
        self.ca_file: pathlib.Path | None = None
        self.audit_log: pathlib.Path | None = None
        self.startup_seconds = 0.0
        self._ca: CertificateAuthority | None = None
        self._etcd: subprocess.Popen | None = None
        self._apiserver: subprocess.Popen | None = None
        self._ssl: ssl.SSLContext | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self, *, detach: bool = False) -> Environment:
        """Start etcd and kube-apiserver and wait until the API server is ready. ``detach``: the processes get their
        own session and outlive this Python process (``envtest up``)."""
        t0 = time.monotonic()
        bins = self.bin_dir or binaries_dir(build=self.build)
        if self.workdir is None:
            self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="envtest-"))
        work = self.workdir
        work.mkdir(parents=True, exist_ok=True)
        pki = work / "pki"
        pki.mkdir(exist_ok=True)
        self._ca = CertificateAuthority()
        self.ca_file = pki / "ca.crt"
        self.ca_file.write_bytes(self._ca.cert_pem)
        serving_cert, serving_key = self._ca.issue("kube-apiserver", server=True)
        (pki / "apiserver.crt").write_bytes(serving_cert)
        (pki / "apiserver.key").write_bytes(serving_key)
        (pki / "sa.key").write_bytes(_rsa_key_pem())
        os.chmod(pki / "apiserver.key", 0o600)
        os.chmod(pki / "sa.key", 0o600)
        self.admin_token = secrets.token_urlsafe(32)
        (pki / "tokens.csv").write_text(f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"{",".join(ADMIN_GROUPS)}"\n')
        os.chmod(pki / "tokens.csv", 0o600)
        (work / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        self.audit_log = work / "audit.log"

        popen = dict(
            stdin=subprocess.DEVNULL, start_new_session=detach, preexec_fn=None if detach else _die_with_parent
        )
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        # free_port() closes the port it found before the servers bind it: another process (a second test worker
        # starting its own server) can take it in between. A start that lost its port is retried on new ports.
        for attempt in range(PORT_ATTEMPTS):
            self._launch(bins, work, popen)
            try:
                self._wait_ready()
                break
            except RuntimeError as exc:
                self._kill()
                if "address already in use" not in str(exc) or attempt == PORT_ATTEMPTS - 1:
                    self.stop()
                    raise
                shutil.rmtree(work / "etcd", ignore_errors=True)
            except BaseException:
                self.stop()
                raise
        self.kubeconfig = self._write_kubeconfig(work / "kubeconfig", ADMIN_USER, {"token": self.admin_token})
        self.startup_seconds = time.monotonic() - t0
        return self

    def _launch(self, bins: pathlib.Path, work: pathlib.Path, popen: dict) -> None:
        """etcd and kube-apiserver on ports free a moment ago."""
        pki = work / "pki"
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._etcd = subprocess.Popen(
            [
                str(bins / "etcd"),
                "--name=envtest",
                f"--data-dir={work / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=envtest=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            stdout=open(work / "etcd.log", "ab"),
            stderr=subprocess.STDOUT,
            **popen,
        )
        self.server = f"https://127.0.0.1:{api_port}"
        self._apiserver = subprocess.Popen(
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                # Pods would need the token controller of kube-controller-manager; nothing here runs pods.
                "--disable-admission-plugins=ServiceAccount",
                f"--audit-policy-file={work / 'audit-policy.json'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-maxsize=0",
                "--audit-log-maxbackup=0",
                *self.extra_apiserver_args,
            ],
            stdout=open(work / "kube-apiserver.log", "ab"),
            stderr=subprocess.STDOUT,
            **popen,
        )

    def _kill(self) -> None:
        """Stop both processes, keeping the work directory (a start retried on new ports reuses it)."""
        for proc in (self._apiserver, self._etcd):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(5)
        self._apiserver = self._etcd = None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver)):
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode} during start:\n{self.log_tail(name)}")
            try:
                status, body = self.request("GET", "/readyz")
                if status == 200:
                    # the bootstrap controller creates these shortly after /readyz; tests create objects in them
                    status, _ = self.request("GET", "/api/v1/namespaces/default")
                    if status == 200:
                        return
                last = f"{status} {str(body)[:300]}"
            except (OSError, urllib.error.URLError) as e:
                last = repr(e)
            time.sleep(0.1)
        raise RuntimeError(
            f"kube-apiserver not ready after {self.start_timeout}s ({last}):\n{self.log_tail('kube-apiserver')}"
        )

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd; remove the work directory if this object created it."""
        for proc in (self._apiserver, self._etcd):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._apiserver = self._etcd = None
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Environment:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in (("kube-apiserver", self._apiserver), ("etcd", self._etcd)) if p}

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = (self.workdir or pathlib.Path("/nonexistent")) / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # ---------------------------------------------------------------- identities
    def _write_kubeconfig(self, path: pathlib.Path, user: str, credentials: dict) -> pathlib.Path:
        """A kubeconfig for ``user`` (JSON, which every kubeconfig reader accepts as YAML)."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "envtest",
            "preferences": {},
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.server, "certificate-authority-data": _b64(self._ca.cert_pem)},
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user, "namespace": "default"}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
        os.chmod(path, 0o600)
        return path

    def kubeconfig_for(
        self, user: str, groups: Iterable[str] = (), path: str | os.PathLike | None = None
    ) -> pathlib.Path:
        """A kubeconfig authenticating as ``user`` in ``groups`` with a client certificate. For a ServiceAccount's
        identity: user ``system:serviceaccount:<ns>:<name>``, groups ``system:serviceaccounts`` and
        ``system:serviceaccounts:<ns>`` (RBAC subjects of kind ServiceAccount match that user name)."""
        cert, key = self._ca.issue(user, groups)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
        target = pathlib.Path(path) if path else self.workdir / "users" / f"{safe}.kubeconfig"
        return self._write_kubeconfig(
            target, user, {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
        )

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: str | os.PathLike | None = None, expiration_seconds: int = 86400
    ) -> pathlib.Path:
        """A kubeconfig holding a token the API server issues for ServiceAccount ``namespace/name`` (created, with
        its namespace, if missing): the credentials a pod of that ServiceAccount would mount."""
        for path_, body in (
            ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
            (
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            ),
        ):
            status, out = self.request("POST", path_, body)
            if status not in (201, 409):
                raise RuntimeError(f"POST {path_}: {status} {out}")
        status, out = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
        )
        if status != 201:
            raise RuntimeError(f"TokenRequest for {namespace}/{name}: {status} {out}")
        target = pathlib.Path(path) if path else self.workdir / "users" / f"sa-{namespace}-{name}.kubeconfig"
        return self._write_kubeconfig(
            target, f"system:serviceaccount:{namespace}:{name}", {"token": out["status"]["token"]}
        )

    # ---------------------------------------------------------------- calls
    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, dict | str]:
        """One call as admin (or ``token``): (status, decoded JSON or text). For set-up; tests use real clients."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as r:
                status, raw = r.status, r.read(16 << 20)
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read(1 << 20)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def configuration(self):
        """A kubernetes.client.Configuration for the admin (the kubernetes package is imported only here)."""
        import kubernetes

        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        return cfg

    def audit_offset(self) -> int:
        """The audit log's current size: pass it to ``audit_events`` to read only what happens after now."""
        return self.audit_log.stat().st_size if self.audit_log and self.audit_log.exists() else 0

    def audit_events(self, since: int = 0, user: str | None = None) -> list[dict]:
        """Audit events (one per completed request) written after byte offset ``since``, optionally of one user."""
        if not self.audit_log or not self.audit_log.exists():
            return []
        with open(self.audit_log, "rb") as f:
            f.seek(since)
            lines = f.read().splitlines()
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # a line being written right now
                continue
            if user is None or event.get("user", {}).get("username") == user:
                events.append(event)
        return events


# ---------------------------------------------------------------------------------------------------- command line
def _state_file(directory: pathlib.Path) -> pathlib.Path:
    return directory / "state.json"


def _is_ours(pid: int, binary: str) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == binary
    except OSError:
        return False


def cmd_up(directory: pathlib.Path) -> int:
    if _state_file(directory).exists():
        state = json.loads(_state_file(directory).read_text())
        if all(_is_ours(pid, name) for name, pid in state["pids"].items()):
            print(f"already running: {state['server']}; kubeconfig {directory / 'kubeconfig'}")
            return 0
        cmd_down(directory)
    env = Environment(workdir=directory / "data")
    env.start(detach=True)
    kubeconfig = directory / "kubeconfig"
    shutil.copyfile(env.kubeconfig, kubeconfig)
    os.chmod(kubeconfig, 0o600)
    _state_file(directory).write_text(json.dumps({"server": env.server, "pids": env.pids}, indent=2))
    print(f"kube-apiserver {env.server} ready in {env.startup_seconds:.1f}s (etcd + API server in the background)")
    print(f"export KUBECONFIG={kubeconfig.resolve()}   # admin; stop with: make envtest-down")
    return 0


def cmd_down(directory: pathlib.Path) -> int:
    state_path = _state_file(directory)
    if state_path.exists():
        state = json.loads(state_path.read_text())
        for name in ("kube-apiserver", "etcd"):
            pid = state["pids"].get(name)
            if pid and _is_ours(pid, name):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 15
                while _is_ours(pid, name) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if _is_ours(pid, name):
                    os.kill(pid, signal.SIGKILL)
    if directory.exists():
        shutil.rmtree(directory)
        print(f"stopped; removed {directory}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.k8s.envtest",
        description="a local kube-apiserver + etcd for trying the operator, kubectl and helm",
    )
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument("--dir", default=str(ROOT / ".envtest"), help="state, data and kubeconfig (default .envtest)")
    args = parser.parse_args(argv)
    directory = pathlib.Path(args.dir)
    try:
        return cmd_up(directory) if args.command == "up" else cmd_down(directory)
    except EnvtestUnavailable as e:
        print(f"envtest: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
