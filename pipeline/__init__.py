"""PySpark jobs over mqcloud topics: archive, traffic rollups and message trace."""
