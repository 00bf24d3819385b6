"""The REST API (``/api/v1/``): DRF viewsets over the catalog, with an OpenAPI schema."""
