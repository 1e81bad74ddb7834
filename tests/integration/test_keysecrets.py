"""Secrets holding keys, read and generated through a real API server (controller/keysecrets):
what the GitProvider sources and the encryption resolver share."""

from __future__ import annotations

import base64

import pytest

from kubescribe.controller.keysecrets import (
    BACKUP_ANNOTATION,
    SecretUnavailable,
    read_object,
    write_generated,
)
from kubescribe.controller.ownership import MANAGED_BY, created_by_kubescribe
from kubescribe.kube.client import KubeClient
from kubescribe_devenv.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane


async def test_a_generated_key_is_created_marked_and_added_to_once(
    controlplane: ControlPlane, namespace: str
) -> None:
    client = await KubeClient.connect(controlplane.kubeconfig)
    try:
        assert await read_object(client, "secrets", namespace, "keys") is None
        created = await write_generated(
            client,
            namespace,
            "keys",
            {"first.key": b"one"},
            backup_note="back it up",
            existing=None,
            precondition=True,
        )
        read = await read_object(client, "secrets", namespace, "keys")
        assert read is not None
        assert created_by_kubescribe(read)
        assert read["metadata"]["labels"] == MANAGED_BY
        assert read["metadata"]["annotations"] == {BACKUP_ANNOTATION: "back it up"}
        assert base64.b64decode(read["data"]["first.key"]) == b"one"

        await write_generated(
            client,
            namespace,
            "keys",
            {"second.key": b"two"},
            backup_note="back it up",
            existing=read,
            precondition=True,
        )
        both = await read_object(client, "secrets", namespace, "keys")
        assert both is not None
        assert sorted(both["data"]) == ["first.key", "second.key"]

        # A second writer that read the Secret before the first one added its key is refused.
        with pytest.raises(SecretUnavailable, match=r"cannot write Secret 'keys': 409"):
            await write_generated(
                client,
                namespace,
                "keys",
                {"third.key": b"three"},
                backup_note="back it up",
                existing=created,
                precondition=True,
            )
        # Without the precondition (the encryption resolver's age keys) the key is added.
        await write_generated(
            client,
            namespace,
            "keys",
            {"third.key": b"three"},
            backup_note="back it up",
            existing=created,
            precondition=False,
        )
        final = await read_object(client, "secrets", namespace, "keys")
        assert final is not None
        assert sorted(final["data"]) == ["first.key", "second.key", "third.key"]
    finally:
        await client.close()


async def test_a_secret_that_cannot_be_read_is_unavailable_not_missing(
    controlplane: ControlPlane, namespace: str
) -> None:
    client = await KubeClient.connect(controlplane.user_kubeconfig("nobody"))
    try:
        with pytest.raises(SecretUnavailable, match=r"cannot read Secret 'keys': 403 Forbidden"):
            await read_object(client, "secrets", namespace, "keys")
        with pytest.raises(SecretUnavailable, match=r"cannot read ConfigMap 'hosts': 403"):
            await read_object(client, "configmaps", namespace, "hosts")
    finally:
        await client.close()
