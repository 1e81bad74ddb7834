"""An idle writer lets go of its clone and caches, and its next write rebuilds them: the
result in Git is the same as without the release."""

from __future__ import annotations

from pathlib import Path

from kubescribe import metrics
from kubescribe.mirror.changes import Operation
from kubescribe_devenv.gitremote import BareRemote
from tests.builders import document, path_of, read_doc, target, upsert
from tests.support import WorkerHarness, until


async def test_an_idle_writer_releases_its_clone_and_writes_again_after(
    remote: BareRemote, tmp_path: Path
) -> None:
    h = WorkerHarness(remote.url, tmp_path / "cache", remote=remote, idle_release=0.2)
    h.worker.configure([target()])
    h.worker.start()
    try:
        before = metrics.WRITER_RELEASES._value.get()
        await h.settle(upsert("a", k="1"))
        commits = len(remote.log())
        await until(
            lambda: metrics.WRITER_RELEASES._value.get() > before, "the idle writer released"
        )
        assert h.worker._writer.repo is None  # the clone is closed
        assert len(remote.log()) == commits  # a release writes nothing
        await h.settle(upsert("a", op=Operation.UPDATE, k="2"), upsert("b", k="1"))
        assert read_doc(remote, path_of("a")) == document("a", k="2")
        assert read_doc(remote, path_of("b")) == document("b", k="1")
    finally:
        await h.worker.stop(timeout=5)
