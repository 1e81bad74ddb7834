"""kubescribe.store."""
