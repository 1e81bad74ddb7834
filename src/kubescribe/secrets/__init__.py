"""kubescribe.secrets."""
