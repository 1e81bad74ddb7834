"""kubescribe.server."""
