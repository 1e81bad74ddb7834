"""A real single-node Kubernetes cluster for running kubescribe as a Pod (root only).

etcd, kube-apiserver (ServiceAccount tokens, Node+RBAC), kube-controller-manager,
kube-scheduler, containerd + runc and kubelet, all inside a private network + mount namespace
held by one `unshare ... sleep infinity` process. Images come from OCI archives imported
into containerd (no registry, no Docker). Inside the namespace the node IP (10.77.0.2) and
the `kubernetes` Service IP (10.0.0.1) sit on `lo` and the apiserver listens on 0.0.0.0:443,
so Pods reach it without kube-proxy. The host sees only 127.0.0.1:<random> (a forwarder
thread, for kubectl and helm); `expose_host_port(P)` makes a host-only server on
127.0.0.1:P (a test's Git server) reachable from Pods at 10.77.0.2:P.

Not routed: ClusterIP Services other than `kubernetes` (no kube-proxy) and cluster DNS.

Teardown kills only processes found in the cluster's own cgroup tree and network namespace,
removes its cgroups and leaves no mount behind (they die with the mount namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from kubescribe_devenv.controlplane import (
    KUBE_VERSION,
    REPO_ROOT,
    binaries_dir,
    kubeconfig_yaml,
    run_tool,
)
from kubescribe_devenv.pki import CertificateAuthority, KeyPair, rsa_key_pair

HELM_VERSION = "v3.22.0"
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-cluster.sh"
NODE = "kubescribe-node"
NODE_IP = "10.77.0.2"
SERVICE_IP = "10.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.88.0.0/24"
PAUSE_IMAGE = "localhost/kubescribe/pause:local"
_CGROUP_CONTROLLERS = (
    "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd",
)  # fmt: skip
# Paths kubelet, containerd and CNI write whatever their configuration says: private tmpfs.
_PRIVATE_DIRS = ("/run/containerd", "/run/netns", "/var/lib/kubelet", "/var/lib/cni",
                 "/var/log/containers")  # fmt: skip
# kubelet insists on these kernel settings and would write them (they are not namespaced):
# it is shown them read-only in its own mount namespace instead.
_SYSCTLS = (
    ("vm/overcommit_memory", "1"), ("vm/panic_on_oom", "0"), ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"), ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
)  # fmt: skip
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)
T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster could not be built or started."""


@dataclass(frozen=True)
class ClusterTools:
    """The cached build: kubelet, kube-controller-manager, kube-scheduler, helm, kubectl and
    the control plane, the pause image and the Debian bookworm + Python 3.11 base image."""

    root: Path
    controlplane: Path

    @property
    def helm(self) -> Path:
        return self.root / "bin" / "helm"

    @property
    def kubectl(self) -> Path:
        return self.controlplane / "kubectl"

    @property
    def pause_image(self) -> Path:
        return self.root / "images" / "pause.oci.tar"

    @property
    def base_image(self) -> Path:
        return next((self.root / "images").glob("base-bookworm-*.oci.tar"))


def missing_requirements() -> list[str]:
    """What this machine lacks to run the cluster (root, Debian packages)."""
    missing = [] if os.geteuid() == 0 else ["root"]
    for binary in (
        "containerd",
        "runc",
        "ctr",
        "unshare",
        "nsenter",
        "ip",
        "mmdebstrap",
        "buildah",
        "go",
    ):
        if shutil.which(binary) is None:
            missing.append(binary)
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("containernetworking-plugins")
    return missing


def cluster_tools() -> ClusterTools:
    """Build (or find, when cached) everything beyond the control plane; see build-cluster.sh."""
    override = os.environ.get("KUBESCRIBE_CLUSTER_DIR")
    cp = binaries_dir()
    if override:
        return ClusterTools(Path(override), cp)
    env = {**os.environ, "KUBE_VERSION": KUBE_VERSION, "HELM_VERSION": HELM_VERSION}
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise ClusterError(f"cluster build failed:\n{done.stderr[-4000:]}")
    return ClusterTools(Path(done.stdout.strip().splitlines()[-1]), cp)


def _setns(fd: int) -> None:
    """Move the calling thread (only) into the network namespace `fd`."""
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _splice(a: socket.socket, b: socket.socket) -> None:
    back = threading.Thread(target=_pump, args=(b, a), daemon=True)
    back.start()
    _pump(a, b)
    back.join()
    a.close()
    b.close()


@dataclass
class Cluster:
    """A single-node cluster; use as a context manager or `start()`/`stop()`.

    `kubeconfig` is a system:masters admin on the host side. `images` (OCI archives) are
    imported while the control plane starts; `import_image()` adds more later.
    """

    images: Sequence[Path] = ()
    tools: ClusterTools | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kubescribe-kc-")))
    keep_workdir: bool = False

    def __post_init__(self) -> None:
        self.workdir = self.workdir.absolute()
        self.kubeconfig = self.workdir / "kubeconfig"
        self.ca = CertificateAuthority("kubescribe-cluster-ca")
        self._holder: subprocess.Popen[bytes] | None = None
        self._procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []
        self._listeners: list[socket.socket] = []
        self._cgroup = f"kubescribe-{os.getpid()}-{id(self) % 100000}"
        self.timings: dict[str, float] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(failed=exc[0] is not None)

    def start(self, timeout: float = 180.0) -> None:
        t0 = time.monotonic()
        tools = self.tools = self.tools or cluster_tools()
        try:
            (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
            self._pki()
            self._namespaces()
            self._cgroups()
            self._configs()
            self._start_components(tools, timeout)
        except BaseException:
            self.stop(failed=True)
            raise
        self.timings["start"] = time.monotonic() - t0

    def stop(self, *, failed: bool = False) -> None:
        """Stop everything started here; remove the cgroups and (unless kept) the workdir."""
        t0 = time.monotonic()
        by_name = {name: proc for name, proc, _ in self._procs}
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager"):
            self._stop_proc(by_name.get(name))
        daemons = {proc.pid for _, proc, _ in self._procs}
        for _ in range(100):  # Pods (own netns, our cgroups), then shims and hostNetwork Pods
            pids = self._cgroup_pids() | (self._netns_pids() - daemons)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for name in ("containerd", "kube-apiserver", "etcd"):
            # kube-apiserver flushes its audit webhook on the way out; the receiver is gone
            self._stop_proc(by_name.get(name), timeout=3 if name == "kube-apiserver" else 10)
        for pid in self._netns_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.close()
        self._listeners.clear()
        if self._holder is not None:
            self._holder.kill()
            self._holder.wait()
            self._holder = None
        for _, _, log in self._procs:
            log.close()
        self._procs.clear()
        self._remove_cgroups()
        self.timings["stop"] = time.monotonic() - t0
        if not (failed or self.keep_workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- for tests -------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        assert self.tools is not None
        return run_tool(
            [str(self.tools.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            error=ClusterError,
            input=input,
            timeout=timeout,
            check=check,
        )

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        assert self.tools is not None
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.workdir / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.workdir / "helm" / "config"),
            "HELM_DATA_HOME": str(self.workdir / "helm" / "data"),
        }
        return run_tool(
            [str(self.tools.helm), f"--kubeconfig={self.kubeconfig}", *args],
            error=ClusterError,
            timeout=timeout,
            env=env,
            check=check,
        )

    def user_kubeconfig(self, user: str, group: str | None = None) -> Path:
        """A host-side kubeconfig of a client certificate for `user` (never system:masters)."""
        pair = self.ca.issue(user, organization=group, client=True)
        return self._write(
            f"kubeconfig-{user}", kubeconfig_yaml(self._server, self.ca.cert_pem, pair)
        )

    def import_image(self, archive: Path) -> float:
        """Import an OCI (or docker) image archive into the node's containerd; seconds taken."""
        t0 = time.monotonic()
        done = self._ns_run(*self._ctr(), "images", "import", str(archive.resolve()))
        if done.returncode != 0:
            raise ClusterError(f"importing {archive.name}: {done.stderr.strip()}")
        return time.monotonic() - t0

    def kill_container(self, container_id: str) -> int:
        """SIGKILL the process of a container (`containerd://<id>` or `<id>`), as a crash or an
        OOM kill would: no signal handler runs. Returns the PID killed."""
        wanted = container_id.removeprefix("containerd://")
        listing = self._ns_run(*self._ctr(), "tasks", "ls", check=True).stdout.splitlines()
        for line in listing[1:]:
            fields = line.split()
            if fields and fields[0] == wanted:
                pid = int(fields[1])
                os.kill(pid, signal.SIGKILL)
                return pid
        raise ClusterError(f"no running task {wanted}")

    def expose_host_port(self, port: int, address: str = NODE_IP) -> None:
        """Host 127.0.0.1:`port` becomes reachable from Pods as 10.77.0.2:`port` (or, with
        `address="127.0.0.1"`, from the node's own processes such as containerd)."""
        listener = self._in_netns(lambda: socket.create_server((address, port), backlog=64))
        self._listeners.append(listener)

        def handle(conn: socket.socket) -> None:  # a thread of the host's network namespace
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                conn.close()
                return
            upstream.settimeout(None)
            _splice(conn, upstream)

        threading.Thread(target=self._accept, args=(listener, handle), daemon=True).start()

    def use_host_registry(self, port: int) -> str:
        """Let containerd pull from a plain-HTTP registry on the host's 127.0.0.1:`port` under
        the same name (`127.0.0.1:<port>/...`, as the host pushed it): the port is forwarded to
        the node's loopback, and a hosts.toml (read at each pull) allows plain HTTP for that
        host only. Returns the registry's host name."""
        host = f"127.0.0.1:{port}"
        self.expose_host_port(port, address="127.0.0.1")
        self._write(
            f"containerd/certs.d/{host}/hosts.toml",
            f'server = "http://{host}"\n\n[host."http://{host}"]\n'
            '  capabilities = ["pull", "resolve"]\n',
            0o644,
        )
        return host

    def image_names(self) -> list[str]:
        """The image references containerd (k8s.io namespace) knows."""
        listing = self._ns_run(*self._ctr(), "images", "ls", "-q", check=True).stdout
        return listing.split()

    @property
    def holder_pid(self) -> int:
        assert self._holder is not None
        return self._holder.pid

    # -- setup -----------------------------------------------------------------------------
    def _write(self, name: str, data: bytes | str, mode: int = 0o600) -> Path:
        path = self.workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        path.chmod(mode)
        return path

    def _pair(self, name: str, pair: KeyPair) -> tuple[Path, Path]:
        return self._write(f"pki/{name}.crt", pair.cert_pem), self._write(
            f"pki/{name}.key", pair.key_pem
        )

    def _pki(self) -> None:
        ca = self.ca
        self._write("pki/ca.crt", ca.cert_pem, 0o644)
        names = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local", "localhost")  # fmt: skip
        self._pair(
            "apiserver",
            ca.issue("kube-apiserver", hosts=(*names, "127.0.0.1", SERVICE_IP, NODE_IP)),
        )
        self._pair("kubelet-serving", ca.issue(NODE, hosts=(NODE, NODE_IP, "127.0.0.1")))
        self._pair(
            "apiserver-kubelet-client",
            ca.issue("kube-apiserver-kubelet-client", organization="system:masters", client=True),
        )
        sa_key, sa_pub = rsa_key_pair()
        self._write("pki/sa.key", sa_key)
        self._write("pki/sa.pub", sa_pub)
        inner = f"https://{NODE_IP}:443"
        clients = {
            "admin-inner": ("kubescribe-admin", "system:masters"),
            "controller-manager": ("system:kube-controller-manager", None),
            "scheduler": ("system:kube-scheduler", None),
            "kubelet": (f"system:node:{NODE}", "system:nodes"),
        }
        for file, (cn, org) in clients.items():
            pair = ca.issue(cn, organization=org, client=True)
            self._write(f"{file}.kubeconfig", kubeconfig_yaml(inner, ca.cert_pem, pair))
        self._admin = ca.issue("kubescribe-admin", organization="system:masters", client=True)

    def _ns(self, *argv: str) -> list[str]:
        pid = self.holder_pid
        return ["nsenter", f"--net=/proc/{pid}/ns/net", f"--mount=/proc/{pid}/ns/mnt", "--", *argv]

    def _ns_run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self._ns(*argv), capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: {done.stderr.strip()[-2000:]}")
        return done

    def _namespaces(self) -> None:
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "sleep", "infinity"],
            start_new_session=True,
        )
        (self.workdir / "holder.pid").write_text(f"{self._holder.pid}\n")
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{self._holder.pid}/ns/net") != own:
                    break
            time.sleep(0.01)
        else:
            raise ClusterError("unshare did not create a network namespace")
        for d in _PRIVATE_DIRS:
            Path(d).mkdir(parents=True, exist_ok=True)
            self._ns_run("mount", "-t", "tmpfs", "-o", "mode=0755", "kubescribe", d, check=True)
        self._ns_run("ip", "link", "set", "lo", "up", check=True)
        for address in (NODE_IP, SERVICE_IP):
            self._ns_run("ip", "addr", "add", f"{address}/32", "dev", "lo", check=True)
        for path, value in _SYSCTLS:
            fake = self._write(f"sysctl/{path.replace('/', '_')}", f"{value}\n", 0o644)
            self._ns_run("mount", "--bind", "-o", "ro", str(fake), f"/proc/sys/{path}", check=True)

    def _cgroups(self) -> None:
        for controller in _CGROUP_CONTROLLERS:
            parent = Path("/sys/fs/cgroup") / controller
            if not parent.is_dir():
                continue
            mine = parent / self._cgroup
            mine.mkdir(exist_ok=True)
            if controller == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (mine / name).write_text((parent / name).read_text())

    def _configs(self) -> None:
        w, pki = self.workdir, self.workdir / "pki"
        runtime = os.environ.get("KUBESCRIBE_CLUSTER_RUNTIME", shutil.which("runc") or "runc")
        conflist = {
            "cniVersion": "0.4.0",
            "name": "kubescribe",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "kscribe0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(w / "cni" / "ipam"),
                    },
                },
                # hostPort: the node address (10.77.0.2) reaches a Pod's port; kube-apiserver
                # calls webhooks that way, as on clusters whose control plane is off the Pod
                # network.
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
            ],
        }
        self._write("cni/net.d/10-kubescribe.conflist", json.dumps(conflist, indent=1), 0o644)
        c = w / "containerd"
        # restrict_oom_score_adj: some sandboxes refuse a negative oom_score_adj even to root
        # (runc: "can't get final child's PID from pipe: EOF"); clamp it to containerd's own.
        self._write(
            "containerd/config.toml",
            f"""version = 2
root = "{c}/root"
state = "{c}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{c}/containerd.sock"
[ttrpc]
  address = "{c}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runtime}"
        Root = "{c}/runc"
  [plugins."io.containerd.grpc.v1.cri".registry]
    # hosts.toml per registry (use_host_registry); none: the defaults (HTTPS)
    config_path = "{c}/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{w}/cni/net.d"
""",
            0o644,
        )
        (w / "manifests").mkdir(exist_ok=True)
        self._write("resolv.conf", "nameserver 127.0.0.1\n", 0o644)
        kubelet = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "0.0.0.0",
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            "containerRuntimeEndpoint": f"unix://{c}/containerd.sock",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self._cgroup}",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "failCgroupV1": False,  # default true since 1.35; this host is cgroup v1 hybrid
            "failSwapOn": False,
            "protectKernelDefaults": True,  # never write host sysctls (faked in our mount ns)
            "staticPodPath": str(w / "manifests"),
            "podLogsDir": str(w / "pod-logs"),
            "volumePluginDir": str(w / "kubelet" / "volume-plugins"),
            "clusterDomain": "cluster.local",
            "resolvConf": str(w / "resolv.conf"),
            "serializeImagePulls": False,
            # The release test pulls a side-loaded image under another name: by default (KEP-2535)
            # the kubelet then binds it to that name, and `pullPolicy: Never` of the side-loaded
            # name fails with ErrImageNeverPull.
            "imagePullCredentialsVerificationPolicy": "NeverVerify",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,  # never collect the imported images
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "rotateCertificates": False,
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "5s",
        }
        self._write("kubelet.yaml", json.dumps(kubelet, indent=1), 0o644)

    # -- components ------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / "logs" / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            self._ns(*argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._procs.append((name, proc, log))
        return proc

    def _wait(self, what: str, probe: Callable[[], bool], timeout: float) -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            for name, proc, _ in self._procs:
                if proc.poll() is not None:
                    tail = (self.workdir / "logs" / f"{name}.log").read_text(errors="replace")
                    raise ClusterError(f"{name} exited with {proc.returncode}:\n{tail[-3000:]}")
            try:
                if probe():
                    self.timings[what] = time.monotonic() - t0
                    return
            except Exception as exc:  # the component is not up yet
                last = exc
            time.sleep(0.1)
        raise ClusterError(
            f"{what} not ready after {timeout:.0f}s ({last}); logs in {self.workdir}"
        )

    def _ctr(self) -> list[str]:
        return ["ctr", f"--address={self.workdir}/containerd/containerd.sock", "-n", "k8s.io"]

    def _in_netns(self, fn: Callable[[], T]) -> T:
        """Run `fn` in a thread inside the cluster's network namespace."""
        result: list[T] = []
        error: list[BaseException] = []
        netns = f"/proc/{self.holder_pid}/ns/net"

        def body() -> None:
            fd = os.open(netns, os.O_RDONLY)
            try:
                _setns(fd)
                result.append(fn())
            except BaseException as exc:
                error.append(exc)
            finally:
                os.close(fd)

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        thread.join()
        if error:
            raise error[0]
        return result[0]

    def _inner_ok(self, url: str, context: ssl.SSLContext | None = None) -> bool:
        def get() -> bool:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                return bool(resp.status == 200)

        return self._in_netns(get)

    def _admin_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.workdir / "pki" / "ca.crt"))
        cert, key = self._pair("admin", self._admin)
        ctx.load_cert_chain(cert, key)
        return ctx

    def _apiserver_argv(self, *extra: str) -> list[str]:
        assert self.tools is not None
        pki, cp = self.workdir / "pki", self.tools.controlplane
        return [
            str(cp / "kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0", "--secure-port=443", f"--advertise-address={NODE_IP}",
            f"--tls-cert-file={pki}/apiserver.crt",
            f"--tls-private-key-file={pki}/apiserver.key",
            f"--client-ca-file={pki}/ca.crt", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true", "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki}/sa.pub",
            f"--service-account-signing-key-file={pki}/sa.key",
            f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={pki}/apiserver-kubelet-client.key",
            f"--kubelet-certificate-authority={pki}/ca.crt",
            "--kubelet-preferred-address-types=InternalIP", f"--cert-dir={pki}",
            "--profiling=false",
            *extra,
        ]  # fmt: skip

    def restart_apiserver(self, *extra: str, timeout: float = 90) -> None:
        """Restart kube-apiserver with `extra` flags (audit and admission configuration, as a
        cluster administrator would); the other components reconnect by themselves."""
        for i, (name, proc, log) in enumerate(self._procs):
            if name == "kube-apiserver":
                self._stop_proc(proc)
                log.close()
                del self._procs[i]
                break
        self._spawn("kube-apiserver", self._apiserver_argv(*extra))
        admin = self._admin_context()
        self._wait(
            "kube-apiserver",
            lambda: self._inner_ok(f"https://{NODE_IP}:443/readyz", admin),
            timeout,
        )

    def _start_components(self, tools: ClusterTools, timeout: float) -> None:
        w, pki, cp, bins = (
            self.workdir,
            self.workdir / "pki",
            tools.controlplane,
            tools.root / "bin",
        )
        self._spawn("containerd", ["containerd", "--config", str(w / "containerd" / "config.toml")])
        self._spawn(
            "etcd",
            [
                str(cp / "etcd"), f"--data-dir={w / 'etcd'}",
                "--listen-client-urls=http://127.0.0.1:2379",
                "--advertise-client-urls=http://127.0.0.1:2379",
                "--listen-peer-urls=http://127.0.0.1:2380", "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )  # fmt: skip
        self._wait("etcd", lambda: self._inner_ok("http://127.0.0.1:2379/health"), 60)
        self._spawn("kube-apiserver", self._apiserver_argv())
        self._wait("containerd", lambda: self._ns_run(*self._ctr(), "version").returncode == 0, 60)
        errors: list[str] = []

        def import_all() -> None:  # overlaps the control plane start; pause first
            for archive in (tools.pause_image, *self.images):
                try:
                    self.timings[f"import {archive.name}"] = self.import_image(archive)
                except ClusterError as exc:
                    errors.append(str(exc))

        importer = threading.Thread(target=import_all, daemon=True)
        importer.start()
        admin = self._admin_context()
        self._wait(
            "kube-apiserver", lambda: self._inner_ok(f"https://{NODE_IP}:443/readyz", admin), 90
        )
        self._forward_apiserver()
        kcm = w / "controller-manager.kubeconfig"
        self._spawn(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"), f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
                "--controllers=*",
            ],
        )  # fmt: skip
        sched = w / "scheduler.kubeconfig"
        self._spawn(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"), f"--kubeconfig={sched}",
                f"--authentication-kubeconfig={sched}", f"--authorization-kubeconfig={sched}",
                "--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
            ],
        )  # fmt: skip
        self._spawn(
            "kubelet",
            [
                str(bins / "kubelet"), f"--config={w}/kubelet.yaml",
                f"--kubeconfig={w}/kubelet.kubeconfig", f"--root-dir={w}/kubelet",
                f"--hostname-override={NODE}", f"--node-ip={NODE_IP}", "--v=1",
            ],
        )  # fmt: skip

        def node_ready() -> bool:
            jsonpath = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
            got = self.kubectl("get", "node", NODE, "-o", jsonpath, check=False)
            return got.stdout.strip() == "True"

        self._wait("node Ready", node_ready, timeout)
        importer.join(timeout)
        if errors:
            raise ClusterError("image import failed: " + "; ".join(errors))
        self._wait(
            "default ServiceAccount",
            lambda: self.kubectl("get", "sa", "default", check=False).returncode == 0,
            60,
        )

    def _forward_apiserver(self) -> None:
        """127.0.0.1:<random> on the host -> the apiserver in the cluster's namespace."""
        listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listeners.append(listener)
        port = listener.getsockname()[1]
        netns = f"/proc/{self.holder_pid}/ns/net"

        def handle(conn: socket.socket) -> None:
            fd = os.open(netns, os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            try:
                upstream = socket.create_connection((NODE_IP, 443), timeout=5)
            except OSError:
                conn.close()
                return
            upstream.settimeout(None)
            _splice(conn, upstream)

        threading.Thread(target=self._accept, args=(listener, handle), daemon=True).start()
        self._server = f"https://127.0.0.1:{port}"
        self._write(
            "kubeconfig", kubeconfig_yaml(self._server, self.ca.cert_pem, self._admin, "cluster")
        )

    @staticmethod
    def _accept(listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    # -- teardown --------------------------------------------------------------------------
    def _stop_proc(self, proc: subprocess.Popen[bytes] | None, timeout: float = 10) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _netns_pids(self) -> set[int]:
        if self._holder is None:
            return set()
        try:
            target = os.readlink(f"/proc/{self._holder.pid}/ns/net")
        except OSError:
            return set()
        found = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self._holder.pid:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/net") == target:
                        found.add(int(entry))
        return found

    def _cgroup_pids(self) -> set[int]:
        root = Path("/sys/fs/cgroup/pids") / self._cgroup
        found: set[int] = set()
        if root.exists():
            for procs in root.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    found |= {int(x) for x in procs.read_text().split()}
        return found

    def _remove_cgroups(self) -> None:
        # runc mirrors the tree into the hybrid cgroup2 mount ("unified") too.
        for controller in (*_CGROUP_CONTROLLERS, "unified"):
            root = Path("/sys/fs/cgroup") / controller / self._cgroup
            for _ in range(50):
                if not root.exists():
                    break
                dirs = sorted(
                    (d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)
                )
                try:
                    for d in [*dirs, root]:
                        d.rmdir()
                except OSError:
                    time.sleep(0.1)


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[Cluster]:
    with Cluster(**kwargs) as cluster:
        yield cluster
