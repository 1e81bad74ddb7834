"""Control plane start-up: build (cached or, with --cold-build, from scratch) and start-to-/readyz.

Prints one JSON object. Machine caveat: shared 2-core machines are noisy; compare within a run.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import click

from kubescribe_devenv.controlplane import ControlPlane, binaries_dir


@click.command()
@click.option("--starts", default=5, show_default=True, help="How many start/stop cycles.")
@click.option("--cold-build", is_flag=True, help="Build into an empty cache first (minutes).")
def main(starts: int, cold_build: bool) -> None:
    result: dict[str, object] = {"benchmark": "controlplane_startup"}
    if cold_build:
        os.environ["KUBESCRIBE_CACHE"] = tempfile.mkdtemp(prefix="kubescribe-cache-")
    t0 = time.monotonic()
    bins = binaries_dir()
    result["build_seconds" if cold_build else "build_check_seconds"] = round(
        time.monotonic() - t0, 3
    )
    times = []
    for _ in range(starts):
        with tempfile.TemporaryDirectory() as tmp:
            cp = ControlPlane(workdir=Path(tmp), bin_dir=bins)
            t0 = time.monotonic()
            cp.start()
            times.append(time.monotonic() - t0)
            cp.stop()
    result["first_start_seconds"] = round(times[0], 3)
    if len(times) > 1:
        result["warm_start_p50_seconds"] = round(statistics.median(times[1:]), 3)
        result["warm_start_max_seconds"] = round(max(times[1:]), 3)
    click.echo(json.dumps(result))


if __name__ == "__main__":
    main()
