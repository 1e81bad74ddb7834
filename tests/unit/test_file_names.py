"""File names every clone can check out: long names, case-insensitive collisions and characters
Windows refuses are mapped to stable names."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import MAX_NAME_BYTES, Layout, file_name

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
CLUSTERROLES = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
_WINDOWS_REFUSED = set('<>:"\\|?*') | {chr(c) for c in range(32)}


def test_plain_names_keep_their_file_name() -> None:
    assert file_name("web-1.example") == "web-1.example"
    path = Layout().path_for(Identity("", "ConfigMap", "apps", "web"), CONFIGMAPS)
    assert path == "apps/core/configmaps/web.yaml"


def test_a_253_character_name_gets_a_short_stable_file_name() -> None:
    name = "a" * 253
    mapped = file_name(name)
    assert len(mapped.encode()) <= MAX_NAME_BYTES
    assert mapped == file_name(name)  # stable
    assert mapped != file_name("a" * 252)  # and distinct
    path = Layout().path_for(Identity("", "ConfigMap", "ns", name), CONFIGMAPS, encrypted=True)
    assert all(len(segment.encode()) <= 255 for segment in path.split("/"))


def test_names_differing_only_in_case_do_not_collide_case_insensitively() -> None:
    upper, lower = file_name("Admin:x"), file_name("admin:x")
    assert upper.lower() != lower.lower()
    assert lower == "admin%3Ax"
    assert upper.startswith("Admin%3Ax~")


def test_windows_refused_characters_and_device_names_are_mapped() -> None:
    assert file_name("system:controller:job") == "system%3Acontroller%3Ajob"
    assert file_name("con").startswith("con~")
    assert file_name("lpt1.conf").startswith("lpt1.conf~")
    assert file_name("trailing.").startswith("trailing.~")


_NAMES = st.text(
    alphabet=st.sampled_from(string.ascii_letters + string.digits + '.-_:~ é*?<>\\|"'),
    min_size=1,
    max_size=300,
).filter(lambda s: s not in (".", ".."))


@given(_NAMES, _NAMES)
def test_distinct_names_map_to_names_distinct_ignoring_case(a: str, b: str) -> None:
    if a != b:
        assert file_name(a).lower() != file_name(b).lower()


@given(_NAMES)
def test_mapped_names_are_portable(name: str) -> None:
    mapped = file_name(name)
    assert not set(mapped) & _WINDOWS_REFUSED
    assert mapped.isascii()
    assert len(mapped.encode()) <= MAX_NAME_BYTES
    assert mapped[-1] not in ". "


SECRETS = ResourceType("", "v1", "secrets", "Secret", True)


def test_a_name_ending_in_sops_never_takes_the_encrypted_file_of_another() -> None:
    layout = Layout()
    paths = {
        name: layout.path_for(Identity("", "Secret", "apps", name), SECRETS, encrypted=True)
        for name in ("db", "db.sops", "db.sops.sops")
    }
    assert paths["db"] == "apps/core/secrets/db.sops.yaml"
    assert len(set(paths.values())) == 3
    assert file_name("db.sops") == "db%2Esops"
    plain = layout.path_for(Identity("", "ConfigMap", "apps", "x.sops"), CONFIGMAPS)
    assert not plain.endswith(".sops.yaml")  # a plain document never looks encrypted


@given(st.text(alphabet=string.ascii_lowercase + ".-", min_size=1, max_size=20))
def test_no_encrypted_path_is_shared(name: str) -> None:
    layout = Layout()
    one = layout.path_for(Identity("", "Secret", "ns", name), SECRETS, encrypted=True)
    other = layout.path_for(Identity("", "Secret", "ns", name + ".sops"), SECRETS, encrypted=True)
    assert one != other
