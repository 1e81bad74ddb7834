"""`python -m kubescribe_devenv up|down|status`: the test control plane outside pytest.

`up` starts etcd + kube-apiserver (and a bare Git remote) under `.devenv/` and returns, leaving
them running; `down` stops them (kube-apiserver first, then etcd).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import click

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote

STATE = "state.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(pid: int, timeout: float = 10) -> None:
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@click.group()
@click.option(
    "--dir", "workdir", default=".devenv", show_default=True, type=click.Path(path_type=Path)
)
@click.pass_context
def main(ctx: click.Context, workdir: Path) -> None:
    """A local control plane and Git remote for the demo, benchmarks and manual poking."""
    ctx.obj = workdir.resolve()


@main.command()
@click.pass_obj
def up(workdir: Path) -> None:
    """Start the control plane; print the kubeconfig path and the remote URL."""
    state_file = workdir / STATE
    if state_file.exists():
        state = json.loads(state_file.read_text())
        if all(_alive(pid) for pid in state["pids"].values()):
            click.echo(
                f"already running\nkubeconfig: {state['kubeconfig']}\nremote: {state['remote']}"
            )
            return
        _down(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cp_dir = workdir / "controlplane"
    cp_dir.mkdir(exist_ok=True)
    cp = ControlPlane(workdir=cp_dir, keep_workdir=True)
    start = time.monotonic()
    cp.start()
    remote_path = workdir / "remote.git"
    remote = BareRemote(remote_path) if remote_path.exists() else BareRemote.create(remote_path)
    state = {
        "pids": cp.pids(),
        "kubeconfig": str(cp.kubeconfig),
        "server": cp.server,
        "kubectl": str(cp.bin_dir / "kubectl") if cp.bin_dir else "kubectl",
        "remote": remote.url,
    }
    state_file.write_text(json.dumps(state, indent=2))
    click.echo(f"control plane ready in {time.monotonic() - start:.1f}s")
    click.echo(f"kubeconfig: {cp.kubeconfig}")
    click.echo(f"kubectl: {state['kubectl']} --kubeconfig {cp.kubeconfig}")
    click.echo(f"remote: {remote.url}")


def _down(workdir: Path) -> None:
    state_file = workdir / STATE
    if not state_file.exists():
        return
    pids = json.loads(state_file.read_text())["pids"]
    for name in ("kube-apiserver", "etcd"):
        if name in pids:
            _stop(pids[name])
    state_file.unlink()


@main.command()
@click.pass_obj
def down(workdir: Path) -> None:
    """Stop the control plane (the folder and the remote stay)."""
    _down(workdir)
    click.echo("stopped")


@main.command()
@click.pass_obj
def status(workdir: Path) -> None:
    """Print the state file, or say nothing runs."""
    state_file = workdir / STATE
    click.echo(state_file.read_text() if state_file.exists() else "not running")


if __name__ == "__main__":
    main()
