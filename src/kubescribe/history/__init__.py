"""The mirror's history as a product: who changed an object, what it looked like, what changed
in a window, and giving an old version back (`kubescribe history | show | diff | blame |
timeline | restore`, docs/history.md)."""
