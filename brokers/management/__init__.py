"""Management commands of the broker catalog."""
