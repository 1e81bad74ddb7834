"""Defaults of `kubescribe run` flags, shared by the command line and the parts they configure.

Nothing is imported here: the command line reads these values to declare its flags, and
`kubescribe version` or `--help` must not load the parts themselves (aiohttp, cryptography).
"""

MiB = 1024 * 1024

# The audit receiver: largest batch in bytes and most events in one batch (413 beyond).
DEFAULT_MAX_BODY = 4 * MiB
DEFAULT_MAX_EVENTS = 4096
# Past this, the 64 MiB decoded budget refuses even a plain ASCII body (2 bytes per byte).
MAX_AUDIT_BODY = 16 * MiB

# The client certificate name the admission webhook accepts by default.
DEFAULT_ADMISSION_CLIENT = "kubescribe-admission"

# Operator-managed webhook certificates: seconds the serving certificate and the CA are valid.
CERT_VALIDITY = 90 * 86400.0
CA_VALIDITY = 10 * 365 * 86400.0
