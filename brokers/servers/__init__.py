"""asyncio servers binding one protocol codec to the engine (started by runbroker)."""
