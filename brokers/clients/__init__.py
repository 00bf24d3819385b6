"""Python clients for each protocol: for tests, the CLI, benchmarks and users."""
