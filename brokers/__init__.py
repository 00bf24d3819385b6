"""The broker side of mqcloud: engine, protocol codecs, servers and clients.

Importing it installs the finder of the compiled hot path (:mod:`brokers.compiled`)
before any module it covers is imported."""

from brokers.compiled import install

install()
