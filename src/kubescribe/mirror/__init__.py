"""kubescribe.mirror."""
