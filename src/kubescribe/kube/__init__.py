"""kubescribe.kube."""
