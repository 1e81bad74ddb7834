"""A real kube-apiserver + etcd on loopback, started the way envtest does (no kubelet)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kubescribe_devenv.pki import CertificateAuthority, KeyPair, rsa_key_pair

KUBE_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-controlplane.sh"

DEFAULT_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
      - group: ""
        resources: ["events"]
      - group: events.k8s.io
        resources: ["events"]
      - group: authentication.k8s.io
        resources: ["tokenreviews"]
      - group: authorization.k8s.io
  - level: None
    verbs: ["get", "list", "watch"]
  - level: None
    resources:
      - group: ""
        resources: ["*/status"]
      - group: "apps"
        resources: ["*/status"]
  - level: RequestResponse
    omitManagedFields: true
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
"""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started."""


@dataclass(frozen=True)
class AuditWebhook:
    """Where kube-apiserver sends its audit events (an HTTPS receiver on loopback).

    `client` is the certificate kube-apiserver presents to the receiver, for receivers that
    authenticate it. `mode` is `batch` (default, 1 s max wait) or `blocking`.
    """

    url: str
    ca_pem: bytes
    client: KeyPair | None = None
    mode: str = "batch"
    policy: str = DEFAULT_AUDIT_POLICY


def binaries_dir() -> Path:
    """Build (or find, when cached) kube-apiserver, kubectl and etcd; return their folder."""
    override = os.environ.get("KUBESCRIBE_CONTROLPLANE_DIR")
    if override:
        return Path(override)
    env = {**os.environ, "KUBE_VERSION": KUBE_VERSION, "ETCD_VERSION": ETCD_VERSION}
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise ControlPlaneError(f"control plane build failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def run_tool(
    argv: Sequence[str],
    *,
    error: type[Exception],
    input: str | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command-line tool (kubectl, helm) and capture its output; raise `error` with its
    stderr when `check` and it failed."""
    done = subprocess.run(
        list(argv),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if check and done.returncode != 0:
        name = Path(argv[0]).name
        raise error(f"{name} {' '.join(argv[2:])} failed:\n{done.stderr.strip()}")
    return done


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_yaml(server: str, ca_pem: bytes, user: KeyPair, name: str = "kubescribe") -> str:
    """A kubeconfig for `server` with a client-certificate user, as JSON (valid YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": _b64(user.cert_pem),
                    "client-key-data": _b64(user.key_pem),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    return json.dumps(config, indent=2)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver in a temp folder on random loopback ports.

    Use as a context manager or call `start()`/`stop()`. `kubeconfig` is a system:masters admin.
    Logs stay in `workdir` (kept when `keep_workdir` is set, e.g. after a failure).
    `admission_client` is the certificate kube-apiserver presents to every admission webhook
    (an `AdmissionConfiguration` whose kubeconfig has it as the `*` user).
    """

    audit: AuditWebhook | None = None
    admission_client: KeyPair | None = None
    extra_apiserver_args: Sequence[str] = ()
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kubescribe-cp-")))
    keep_workdir: bool = False
    bin_dir: Path | None = None

    def __post_init__(self) -> None:
        self._procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []
        self.ca = CertificateAuthority("kubescribe-controlplane-ca")
        self.admin = self.ca.issue("kubescribe-admin", organization="system:masters", client=True)
        self.server = ""
        self.kubeconfig = self.workdir / "kubeconfig"
        self._port = 0
        self._etcd_url = ""

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(failed=exc[0] is not None)

    def start(self, timeout: float = 60.0) -> None:
        bins = self.bin_dir or binaries_dir()
        self.bin_dir = bins
        try:
            etcd_url = self._start_etcd(bins)
            self._start_apiserver(bins, etcd_url, timeout)
        except BaseException:
            self.stop(failed=True)
            raise

    def stop(self, *, failed: bool = False) -> None:
        """Stop kube-apiserver first (else it hangs retrying etcd), then etcd."""
        for name, proc, log in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            log.close()
            del name
        self._procs.clear()
        if failed or self.keep_workdir:
            return
        shutil.rmtree(self.workdir, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc, _ in self._procs}

    # -- helpers ---------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,  # a Ctrl-C meant for a parent shell must not reach them
        )
        self._procs.append((name, proc, log))
        return proc

    def _wait(self, name: str, proc: subprocess.Popen[bytes], probe: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise ControlPlaneError(f"{name} exited with {proc.returncode}:\n{tail}")
            with contextlib.suppress(OSError):
                if probe():
                    return
            time.sleep(0.05)
        raise ControlPlaneError(f"{name} not ready after {timeout:.0f}s; logs in {self.workdir}")

    def _start_etcd(self, bins: Path) -> str:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        proc = self._spawn(
            "etcd",
            [
                str(bins / "etcd"),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                return bool(json.load(resp).get("health") == "true")

        self._wait("etcd", proc, healthy, 30)
        return url

    def _write(self, name: str, data: bytes | str) -> Path:
        path = self.workdir / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def _audit_args(self) -> list[str]:
        if self.audit is None:
            return []
        hook = self.audit
        user: dict[str, str] = {}
        if hook.client is not None:
            user = {
                "client-certificate-data": _b64(hook.client.cert_pem),
                "client-key-data": _b64(hook.client.key_pem),
            }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "audit",
                    "cluster": {
                        "server": hook.url,
                        "certificate-authority-data": _b64(hook.ca_pem),
                    },
                }
            ],
            "users": [{"name": "audit", "user": user}],
            "contexts": [{"name": "audit", "context": {"cluster": "audit", "user": "audit"}}],
            "current-context": "audit",
        }
        args = [
            f"--audit-policy-file={self._write('audit-policy.yaml', hook.policy)}",
            f"--audit-webhook-config-file={self._write('audit-webhook.json', json.dumps(config))}",
            f"--audit-webhook-mode={hook.mode}",
        ]
        if hook.mode == "batch":
            args += ["--audit-webhook-batch-max-wait=1s", "--audit-webhook-initial-backoff=1s"]
        return args

    def _admission_args(self) -> list[str]:
        if self.admission_client is None:
            return []
        client = self.admission_client
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "users": [
                {
                    "name": "*",
                    "user": {
                        "client-certificate-data": _b64(client.cert_pem),
                        "client-key-data": _b64(client.key_pem),
                    },
                }
            ],
        }
        path = self._write("admission-webhooks.kubeconfig", json.dumps(kubeconfig))
        plugin = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(path),
        }
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {"name": name, "configuration": plugin}
                for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
            ],
        }
        admission = self._write("admission.json", json.dumps(config))
        return [f"--admission-control-config-file={admission}"]

    def pause(self) -> None:
        """Stop kube-apiserver only (etcd keeps every object): unreachable until `resume`."""
        for entry in [e for e in self._procs if e[0] == "kube-apiserver"]:
            _, proc, log = entry
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            log.close()
            self._procs.remove(entry)

    def resume(self, timeout: float = 60.0) -> None:
        """Start kube-apiserver again, on the same address, over the same etcd."""
        assert self.bin_dir is not None and self._etcd_url, "control plane never started"
        self._start_apiserver(self.bin_dir, self._etcd_url, timeout)

    def _start_apiserver(self, bins: Path, etcd_url: str, timeout: float) -> None:
        self._etcd_url = etcd_url
        port = self._port = self._port or free_port()
        self.server = f"https://127.0.0.1:{port}"
        serving = self.ca.issue("kube-apiserver", hosts=("localhost", "127.0.0.1", "10.0.0.1"))
        sa_key, sa_pub = rsa_key_pair()
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        argv = [
            str(bins / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={self._write('serving.crt', serving.cert_pem)}",
            f"--tls-private-key-file={self._write('serving.key', serving.key_pem)}",
            f"--client-ca-file={self._write('client-ca.crt', self.ca.cert_pem)}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={self._write('sa.pub', sa_pub)}",
            f"--service-account-signing-key-file={self._write('sa.key', sa_key)}",
            f"--cert-dir={certs}",
            *self._audit_args(),
            *self._admission_args(),
            *self.extra_apiserver_args,
        ]
        proc = self._spawn("kube-apiserver", argv)
        self.kubeconfig.write_text(kubeconfig_yaml(self.server, self.ca.cert_pem, self.admin))
        ctx = self.ssl_context()

        def ready() -> bool:
            req = urllib.request.Request(f"{self.server}/readyz")
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                return bool(resp.status == 200)

        self._wait("kube-apiserver", proc, ready, timeout)

    # -- client side -----------------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts the API server and presents the admin certificate."""
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        cert = self._write("admin.crt", self.admin.cert_pem)
        key = self._write("admin.key", self.admin.key_pem)
        ctx.load_cert_chain(cert, key)
        return ctx

    def user_kubeconfig(self, user: str, group: str | None = None) -> Path:
        """A kubeconfig of a client certificate for `user` (in `group`; never system:masters):
        what that user may do is what RBAC grants it."""
        pair = self.ca.issue(user, organization=group, client=True)
        return self._write(
            f"kubeconfig-{user}", kubeconfig_yaml(self.server, self.ca.cert_pem, pair)
        )

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (as the admin unless `kubeconfig` names
        another user); raise with its stderr when `check` fails."""
        assert self.bin_dir is not None, "control plane not started"
        config = kubeconfig or self.kubeconfig
        return run_tool(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={config}", *args],
            error=ControlPlaneError,
            input=input,
            timeout=timeout,
            check=check,
        )

    def apply(self, manifest: str, *args: str) -> None:
        self.kubectl("apply", "-f", "-", *args, input=manifest)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Wait until the CRDs named (`crd/<name>` or `<name>`; all CRDs when none is) are
        Established. `kubectl wait --for=condition=Established` fails at once, instead of
        waiting, on a CRD the server has not yet given any condition."""
        names = [c.removeprefix("crd/") for c in crds]
        deadline = time.monotonic() + timeout
        while True:
            found = self.get_json("crd", *names)
            items = found.get("items", [found]) if names else found["items"]
            waiting = [
                item["metadata"]["name"]
                for item in items
                if not any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in item.get("status", {}).get("conditions") or []
                )
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRDs not established in {timeout:.0f} s: {waiting}")
            time.sleep(0.1)

    def register_validating_webhook(
        self, name: str, url: str, ca_pem: bytes, rules: list[dict[str, Any]]
    ) -> None:
        """Point a ValidatingWebhookConfiguration at a local HTTPS server (fail-open)."""
        manifest = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{name}.kubescribe.io",
                    "clientConfig": {"url": url, "caBundle": _b64(ca_pem)},
                    "rules": rules,
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "timeoutSeconds": 5,
                }
            ],
        }
        self.apply(json.dumps(manifest))


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[ControlPlane]:
    with ControlPlane(**kwargs) as cp:
        yield cp
