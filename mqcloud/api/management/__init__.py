"""Management commands of the REST API."""
