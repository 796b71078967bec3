"""The model layer: talking to OpenAI-compatible endpoints through langchain-openai, counting and pricing what
each call used, and classifying how calls fail.

- `llm.providers`: the provider table (each provider's quirks) and `provider:model` ids;
- `llm.families`: which models share a lineage;
- `llm.prices`: the price table;
- `llm.tokens`: token estimates and the context-size guard;
- `llm.usage`: the usage ledger of a run and the recorder that fills it;
- `llm.client`: the bounded `ChatOpenAI` every call goes through;
- `llm.factory`: `ModelFactory`, the one way to get a chat model;
- `llm.failures`: failure classes, retry policy and the one failure → message mapper.

It imports nothing of Parley's but `core`.
"""
