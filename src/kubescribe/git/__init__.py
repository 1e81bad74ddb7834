"""kubescribe.git."""
