"""SOPS + age: an encoder/decoder byte-compatible with the sops binary, operator-derived data
keys, RE2 crypt rules, the sensitive-type policy."""
