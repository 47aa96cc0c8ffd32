-- The restricted ClickHouse user that analyst SQL runs as on a ClickHouse server.
-- Run once as an administrator (clickhouse-client --multiquery < infra/clickhouse-analyst.sql),
-- after choosing a password, then point agentlog at it:
--   AGENTLOG_CLICKHOUSE_ANALYST_URL=http://agentlog_analyst:PASSWORD@host:8123/default
-- agentlog checks every statement before it runs (see docs/security.md); this user is the
-- server's own second wall: it can read the three promised tables and nothing else, cannot
-- change a setting beyond the profile's bounds, and has no FILE, URL, REMOTE or SYSTEM grant.
-- readonly = 2 (reads only, settings within the bounds below) lets each query carry the
-- sandbox's own SETTINGS clause; with this user agentlog leaves readonly out of it.

CREATE SETTINGS PROFILE IF NOT EXISTS agentlog_analyst_limits SETTINGS
    readonly = 2 CONST,
    max_execution_time = 10 MAX 60,
    max_result_rows = 100000 MAX 1000000,
    max_result_bytes = 67108864 MAX 268435456,
    result_overflow_mode = 'throw' CONST,
    max_memory_usage = 1073741824 MAX 4294967296,
    max_rows_to_read = 2000000000;

CREATE USER IF NOT EXISTS agentlog_analyst
    IDENTIFIED WITH sha256_password BY 'CHANGE-ME'
    SETTINGS PROFILE agentlog_analyst_limits;

GRANT SELECT ON default.events TO agentlog_analyst;
GRANT SELECT ON default.tool_calls TO agentlog_analyst;
GRANT SELECT ON default.rejected_events TO agentlog_analyst;
