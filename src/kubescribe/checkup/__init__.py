"""`kubescribe check`: the whole install checked from the user's kubeconfig."""
