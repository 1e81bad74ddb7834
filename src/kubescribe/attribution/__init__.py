"""kubescribe.attribution."""
