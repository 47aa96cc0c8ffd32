"""Long-term memory jobs (extraction and consolidation) and their view of the topic."""
