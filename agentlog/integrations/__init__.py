"""Adapters that publish what agent frameworks do as agentlog events (``langchain``: a
LangChain/LangGraph callback handler; needs the ``langchain`` extra)."""
