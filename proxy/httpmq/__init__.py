"""The HTTP-MQ service (http-mq.md): a plain ASGI application on the engine, served by
uvicorn in processes of its own (``manage.py runproxy``), never by the web process.

Modules, each with one job: :mod:`.config` (settings from the environment),
:mod:`.envelope` (the JSON envelope), :mod:`.params` (query string and forms),
:mod:`.request` (what a handler sees of a request), :mod:`.auth` (app tokens),
:mod:`.request_id` and :mod:`.messages` (wire forms), :mod:`.handlers` (produce, fetch,
ack, unlock), :mod:`.relay` (console-token endpoints, answered by the web process),
:mod:`.metrics`, :mod:`.runtime` (engine and catalog of a process), :mod:`.app` (the ASGI
application), :mod:`.protocol` (uvicorn's HTTP protocol with this service's limits) and
:mod:`.server` (processes sharing one port).
"""
