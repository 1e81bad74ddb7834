"""Start-up cost of the command line: `kubescribe version`, and `kubescribe run` up to its first
request to the API server. Prints one JSON object.

`run` is pointed at a local listener that stands in for the API server: the moment it accepts
the first connection is when the operator has imported and wired everything it needs before
its first discovery and watches. Its import time is the sum of `-X importtime` self times of
a separate run (the flag itself slows imports a little). Every figure is the median of
`--samples` runs, with the CPU seconds the process used, which a busy machine changes less
than wall time. Shared 2-core machines are noisy: compare within a run.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from kubescribe_devenv.operator import compile_bytecode

PYTHON = sys.executable
_SELF_TIME = re.compile(r"import time:\s+(\d+) \|")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: bench
  user: {{token: bench}}
contexts:
- name: bench
  context: {{cluster: bench, user: bench}}
current-context: bench
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `argv` to its exit."""
    before = os.times()
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = os.times()
    return wall, (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def run_argv(workdir: Path, port: int) -> list[str]:
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(port=port))
    return [
        PYTHON,
        "-m",
        "kubescribe",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(workdir / "cache"),
        "--metrics-addr",
        "",
        "--log-level",
        "warning",
    ]


def first_request(env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds from spawning `kubescribe run` to its first API connection, and
    what it wrote to stderr by then."""
    with tempfile.TemporaryDirectory(prefix="kubescribe-startup-") as tmp, socket.socket() as api:
        api.bind(("127.0.0.1", 0))
        api.listen(16)
        api.settimeout(60)
        started = time.perf_counter()
        proc = subprocess.Popen(
            run_argv(Path(tmp), api.getsockname()[1]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            conn, _ = api.accept()
            wall = time.perf_counter() - started
            cpu = cpu_seconds(proc.pid)
            conn.close()
        finally:
            proc.kill()
            _, stderr = proc.communicate()
    return wall, cpu, stderr


def import_seconds(stderr: str) -> tuple[float, int]:
    """Sum of the self times `-X importtime` reported, and how many modules were imported."""
    times = [int(m[1]) for m in map(_SELF_TIME.match, stderr.splitlines()) if m]
    return sum(times) / 1e6, len(times)


def importtime(argv: list[str]) -> str:
    """What `argv` writes to stderr, run to its exit with `-X importtime`."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    return subprocess.run(argv, check=True, capture_output=True, env=env, text=True).stderr


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


@click.command()
@click.option("--samples", default=10, show_default=True)
def main(samples: int) -> None:
    """Print the start-up figures as one JSON object."""
    compile_bytecode()  # start from bytecode, as the image does
    version = [PYTHON, "-m", "kubescribe", "version"]
    figures: dict[str, Any] = {"samples": samples}
    runs = {
        "python": [timed([PYTHON, "-c", "pass"]) for _ in range(samples)],
        "version": [timed(version) for _ in range(samples)],
        "run_first_request": [first_request()[:2] for _ in range(samples)],
    }
    for name, pairs in runs.items():
        figures[f"{name}_s"] = median([wall for wall, _ in pairs])
        figures[f"{name}_cpu_s"] = median([cpu for _, cpu in pairs])
    with_importtime = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    imports = {
        "version": [importtime(version) for _ in range(samples)],
        "cli": [importtime([PYTHON, "-c", "import kubescribe.cli"]) for _ in range(samples)],
        "run": [first_request(with_importtime)[2] for _ in range(samples)],
    }
    for name, outputs in imports.items():
        found = [import_seconds(stderr) for stderr in outputs]
        figures[f"{name}_import_s"] = median([seconds for seconds, _ in found])
        figures[f"{name}_modules"] = found[0][1]
    figures["load_1m"] = round(os.getloadavg()[0], 2)
    click.echo(json.dumps(figures))


if __name__ == "__main__":
    main()
