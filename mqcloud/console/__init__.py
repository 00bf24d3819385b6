"""The web console: Django templates and htmx partials over the catalog."""
