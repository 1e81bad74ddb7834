"""The API, pure: pydantic models of the kubescribe kinds (the one source of the CRDs and the
README field reference), condition types and reasons, and the kstatus summary rules."""
