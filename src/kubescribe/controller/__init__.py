"""kubescribe.controller."""
