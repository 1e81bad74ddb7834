"""The mirror's pure logic (no I/O): sanitize, identity, layout and paths, deterministic YAML,
the noise policy, commit messages and windows, content digests, kustomization editing."""
