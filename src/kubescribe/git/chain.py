"""The commit chain of one build: commits made in memory on the remote tip, one tree after
another, and how a plan's edits become the next tree."""

from __future__ import annotations

from collections.abc import Callable

import pygit2

from kubescribe.api import conditions as c
from kubescribe.git.lookup_names import lookup_name
from kubescribe.git.plan import Plan
from kubescribe.git.records import Refusal
from kubescribe.git.targets import Committer
from kubescribe.git.tree import TreeConflict, edit_tree
from kubescribe.mirror.authors import Author
from kubescribe.mirror.kustomize import Tree

AUTHOR_SOURCE_TRAILER = "Kubescribe-Author-Source"

Refuse = Callable[[Refusal], None]


class CommitChain:
    """Commits on `base` (None: an empty branch), each on the one before. `tree` is the tree
    of the last commit (or one staged for a group's commit)."""

    def __init__(
        self, repo: pygit2.Repository, committer: Committer, base: pygit2.Oid | None
    ) -> None:
        self.repo = repo
        self.committer = committer
        self.head = base
        self.tree: pygit2.Oid | None = None
        if base is not None:
            commit = repo[base]
            assert isinstance(commit, pygit2.Commit)
            self.tree = commit.tree_id
        self.base_tree = self.tree

    def commit(self, tree: pygit2.Oid, text: str, author: Author | None) -> str:
        """Commit `tree` on the chain; its id. `author` None: the committer (snapshots, and
        every commit under `configured-author`); otherwise the actor, or `UNRESOLVED`."""
        committer = pygit2.Signature(self.committer.name, self.committer.email)
        signature = committer if author is None else signature_of(author)
        if author is not None and author.source:
            text = f"{text.rstrip()}\n\n{AUTHOR_SOURCE_TRAILER}: {author.source}\n"
        parents = [self.head] if self.head is not None else []
        self.head = self.repo.create_commit(None, signature, committer, text, tree, parents)
        self.tree = tree
        return str(self.head)

    def blob(self, data: bytes) -> pygit2.Oid:
        """Store `data` (kept in memory until the batch's pack); its id."""
        self.repo.create_blob(data)
        return pygit2.hash(data)

    def file(self, path: str) -> bytes | None:
        """The content of the file at `path` in the chain's tree, if there is one."""
        root = self.repo[self.tree] if self.tree is not None else None
        if not isinstance(root, pygit2.Tree):
            return None
        try:
            blob = self.repo[root[path].id]
        except KeyError:
            return None
        return blob.data if isinstance(blob, pygit2.Blob) else None

    def write_kustomizations(self, tree: Tree, plan: Plan) -> None:
        """Store the kustomizations the plan edits (with the files listed since), as edits
        of the plan."""
        for directory in sorted(plan.kustomizations):
            k = tree.flush(directory)
            plan.files[k.path] = self.blob(k.dump())

    def stage(self, plan: Plan, refuse: Refuse) -> pygit2.Oid | None:
        """The chain's tree with the plan's edits (None: the plan edits nothing). A write Git
        refuses (a path conflict, a name it will not store) is dropped from the plan and
        refused; the rest still applies."""
        while True:
            edits = plan.edits()
            if not edits:
                return None
            try:
                return edit_tree(self.repo, self.tree, edits)
            except TreeConflict as conflict:
                identity = plan.drop(conflict.path)
                refuse(Refusal(identity, c.PATH_CONFLICT, str(conflict)))
            except Exception:  # one document Git will not store must not block the branch
                if not self._drop_unwritable(plan, refuse):
                    raise

    def _drop_unwritable(self, plan: Plan, refuse: Refuse) -> bool:
        """Refuse the planned writes that fail on their own; False when none does."""
        found = False
        for path, entry in [(e.path, e) for e in plan.writes.values()]:
            try:
                edit_tree(self.repo, self.tree, {path: entry.oid})
            except TreeConflict:
                continue  # the retry reports it
            except Exception as exc:
                refuse(Refusal(plan.drop(path), c.INVALID_PATH, f"{path}: {exc}"))
                found = True
        return found


def signature_of(author: Author) -> pygit2.Signature:
    """A Git identity from an attributed author (user names may hold anything)."""

    def clean(value: str, fallback: str) -> str:
        value = "".join(" " if ch in "<>\n\r\0" else ch for ch in value).strip()
        return value or fallback

    return pygit2.Signature(clean(author.name, "unknown"), clean(author.email, "unknown"))


def read_file(repo: pygit2.Repository, root: pygit2.Oid | None, path: str) -> bytes | None:
    """The content of the file at `path` in the root tree `root`, if there is one."""
    tree = repo[root] if root is not None else None
    if not isinstance(tree, pygit2.Tree):
        return None
    try:
        obj = repo[tree[lookup_name(path)].id]
    except KeyError:
        return None
    return obj.data if isinstance(obj, pygit2.Blob) else None
