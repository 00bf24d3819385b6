"""The sections of the engine facade, one mixin each (see :mod:`brokers.engine.engine`)."""
