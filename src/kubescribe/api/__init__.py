"""kubescribe.api."""
