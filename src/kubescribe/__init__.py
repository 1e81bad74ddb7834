"""kubescribe: mirror the Kubernetes API into Git."""

__version__ = "0.1.0"
