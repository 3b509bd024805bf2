"""llmbus: a Python client of the llmbus serving engine over NATS.

    import asyncio, llmbus
    async def main():
        async with llmbus.Client() as c:          # the running `llmbus serve` (connection file)
            async for out in c.generate("Hello", max_tokens=16, output_kind="delta"):
                print(out.outputs[0].text, end="")
    asyncio.run(main())

The package also holds the code flatc generated from the repository's schemas/*.fbs, one module
per table (llmbus.GenerateRequest, llmbus.RequestOutput, ...), for those who build messages
themselves. The client's own types are in llmbus.types (SamplingParams, RequestOutput, ...):
they are not re-exported here, where they would collide with those generated modules.
"""
from .client import Client
from .connection import Connection
from .errors import (ConnectionFileError, LlmbusError, NoEngineError, RateLimitError, RequestError,
                     RequestTimeoutError)


async def connect(url=None, **kwargs):
    """A connected Client (see Client for the arguments); close it with `await client.close()`."""
    return await Client(url, **kwargs).connect()


__all__ = ["Client", "Connection", "connect", "LlmbusError", "ConnectionFileError", "NoEngineError",
           "RateLimitError", "RequestError", "RequestTimeoutError"]
