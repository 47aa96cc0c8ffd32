"""Provider formats in and out (pure): OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages histories as agentlog events, and an assembled context as either
provider's request payload. docs/providers.md says what maps to what.

Modules: ``openai_chat``, ``openai_responses``, ``anthropic`` (each ``to_events``;
``openai_chat`` and ``anthropic`` also ``render``), ``render.render_context`` (a context answer in a format),
``common`` (ids, times, markers), ``paired`` (calls next to their results)."""
