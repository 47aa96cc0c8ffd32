"""A corpus of hostile analyst SQL: what an attacker or a careless user sends to ``sql``.

Each entry is a statement and what the sandbox must do with it: ``refused`` (a clear
error before anything runs) or ``bounded`` (it may start, and a limit stops it with an
error naming the limit). ``{canary}`` is a file outside the data directory that holds a
secret, ``{target}`` a path outside it that must never be created.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hostile:
    sql: str
    outcome: str  # "refused" or "bounded"

    def render(self, canary: str, target: str) -> str:
        return self.sql.replace("{canary}", canary).replace("{target}", target)


def _refused(*statements: str) -> list[Hostile]:
    return [Hostile(s, "refused") for s in statements]


FILE_READS = _refused(
    "SELECT file('{canary}')",
    "SELECT FILE('{canary}')",
    "SELECT fIlE('{canary}')",
    "SELECT `file`('{canary}')",
    'SELECT "file"(\'{canary}\')',
    "SELECT file('{canary}', 'RawBLOB')",
    "SELECT file('/etc/passwd')",
    "SELECT file('/proc/self/environ')",
    "SELECT file('../../../../etc/hostname')",
    "SELECT file('agentlog.lock')",
    "SELECT length(file('{canary}'))",
    "SELECT count() FROM events WHERE event_id = file('{canary}')",
    "SELECT (SELECT file('{canary}'))",
    "WITH file('{canary}') AS f SELECT f",
    "SELECT /* hi */ file /* there */ ('{canary}')",
    "SELECT\nfile\n(\n'{canary}'\n)",
    "SELECT * FROM file('{canary}', 'LineAsString')",
    "SELECT * FROM file('{canary}', 'CSV', 'x String')",
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT * FROM FILE('{canary}', 'LineAsString')",
    "SELECT * FROM fileCluster('default', '{canary}')",
    "SELECT * FROM filesystem('/')",
    "SELECT * FROM view(SELECT file('{canary}'))",
    "SELECT * FROM events JOIN file('{canary}', 'LineAsString') AS f ON 1",
    "SELECT * FROM (SELECT * FROM file('{canary}', 'LineAsString'))",
    "SELECT * FROM events WHERE event_id IN (SELECT * FROM file('{canary}', 'LineAsString'))",
    "SELECT * FROM events UNION ALL SELECT * FROM file('{canary}', 'LineAsString')",
    "SELECT * FROM file('{canary}', 'LineAsString') SETTINGS readonly=0",
    "SELECT * FROM input('x String')",
    "SELECT * FROM format(JSONEachRow, '{\"a\":1}')",
    "SELECT * FROM icebergLocal('{canary}')",
    "SELECT * FROM deltaLakeLocal('{canary}')",
    "SELECT * FROM paimonLocal('{canary}')",
    "SELECT * FROM sqlite('{canary}', 't')",
    "SELECT * FROM python('x')",
    "SELECT * FROM zeros(10)",
    "SELECT * FROM executable('cat /etc/passwd', 'LineAsString', 'x String')",
    "SELECT * FROM loop(file('{canary}', 'LineAsString'))",
    "SELECT * FROM arrowstream('{canary}')",
)

FILE_WRITES = _refused(
    "SELECT 'x' INTO OUTFILE '{target}'",
    "SELECT 'x' INTO OUTFILE '{target}' TRUNCATE",
    "SELECT 'x' INTO OUTFILE '{target}' APPEND",
    "SELECT 'x' INTO OUTFILE '{target}' COMPRESSION 'gzip'",
    "SELECT 'x' INTO OUTFILE '{target}' AND STDOUT",
    "SELECT * FROM events INTO OUTFILE '{target}'",
    "SELECT * FROM events INTO OUTFILE '{target}' FORMAT CSV",
    "SELECT 1 UNION ALL SELECT 2 INTO OUTFILE '{target}'",
    "SELECT 'x' INTO OUTFILE '{target}' TRUNCATE FORMAT RawBLOB",
    "SELECT 'x' INTO OUTFILE 'relative-out.txt'",
    "INSERT INTO FUNCTION file('{target}', 'CSV', 'x String') VALUES ('x')",
    "INSERT INTO TABLE FUNCTION file('{target}') SELECT 1",
    "CREATE TABLE pwn (x String) ENGINE = File(CSV)",
    "CREATE TABLE pwn ENGINE = File(CSV, '{target}') AS SELECT 1",
    "BACKUP TABLE events TO File('{target}')",
    "BACKUP DATABASE default TO Disk('default', 'b')",
    "RESTORE TABLE events FROM File('{target}')",
)

NETWORK = _refused(
    "SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')",
    "SELECT * FROM urlCluster('default', 'http://127.0.0.1:1/')",
    "SELECT url('http://127.0.0.1:1/')",
    "SELECT * FROM s3('http://127.0.0.1:1/bucket/x', 'CSV')",
    "SELECT * FROM s3Cluster('default', 'http://127.0.0.1:1/b/x')",
    "SELECT * FROM gcs('http://127.0.0.1:1/b/x')",
    "SELECT * FROM oss('http://127.0.0.1:1/b/x')",
    "SELECT * FROM cosn('http://127.0.0.1:1/b/x')",
    "SELECT * FROM azureBlobStorage('http://127.0.0.1:1', 'c', 'b')",
    "SELECT * FROM hdfs('hdfs://127.0.0.1:1/x', 'CSV')",
    "SELECT * FROM remote('127.0.0.1:1', system.one)",
    "SELECT * FROM remoteSecure('127.0.0.1:1', default.events)",
    "SELECT * FROM cluster('default', system.one)",
    "SELECT * FROM clusterAllReplicas('default', system.one)",
    "SELECT * FROM mysql('127.0.0.1:1', 'db', 't', 'u', 'p')",
    "SELECT * FROM postgresql('127.0.0.1:1', 'db', 't', 'u', 'p')",
    "SELECT * FROM mongodb('127.0.0.1:1', 'db', 'c', 'u', 'p', 'x String')",
    "SELECT * FROM redis('127.0.0.1:1', 'k', 'k String')",
    "SELECT * FROM jdbc('jdbc:x', 't')",
    "SELECT * FROM odbc('DSN=x', 't')",
    "SELECT * FROM iceberg('http://127.0.0.1:1/t')",
    "SELECT * FROM deltaLake('http://127.0.0.1:1/t')",
    "SELECT * FROM hudi('http://127.0.0.1:1/t')",
    "SELECT * FROM ytsaurus('http://127.0.0.1:1', 't', 'x String')",
    "SELECT * FROM prometheusQuery('http://127.0.0.1:1', 'up')",
    "SELECT * FROM bigquery('x')",
    "SELECT aiGenerate('say hi')",
    "SELECT aiEmbed('x')",
)

SYSTEM_TABLES = _refused(*(
    [f"SELECT * FROM system.{t}" for t in (
        "tables", "databases", "users", "settings", "processes", "query_log", "disks", "functions",
        "numbers", "one", "parts", "columns", "grants", "roles", "macros", "clusters", "zeros",
        "errors", "metrics", "events", "build_options", "server_settings", "detached_parts",
        "mutations", "merges", "dictionaries", "storage_policies", "text_log", "user_directories",
        "certificates", "stack_trace",
    )]
    + [
        "SELECT count() FROM system.numbers",
        "SELECT * FROM `system`.`users`",
        'SELECT * FROM "system"."tables"',
        "SELECT * FROM system . tables",
        "SELECT * FROM SYSTEM.TABLES",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM INFORMATION_SCHEMA.COLUMNS",
        "SELECT * FROM events WHERE event_id IN system.one",
        "SELECT * FROM events WHERE thread_id IN (SELECT name FROM system.tables)",
        "SELECT * FROM events JOIN system.users AS u ON 1",
        "SELECT * FROM events, system.one",
        "SELECT * FROM memory_facts",
        "SELECT * FROM memory_candidates",
        "SELECT * FROM default.memory_facts",
        "SELECT event_id FROM events WHERE event_id IN memory_facts",
        "SELECT * FROM merge('default', '.*')",
        "SELECT * FROM merge(REGEXP('.*'), '.*')",
        "SELECT * FROM mergeTreeIndex('default', 'events')",
        "SELECT * FROM mergeTreeProjection('default', 'events', 'p')",
        "SELECT * FROM dictionary('d')",
        "SELECT * FROM viewExplain('EXPLAIN', '', (SELECT 1))",
        "SELECT * FROM timeSeriesData('default', 't')",
        "DESCRIBE system.users",
        "DESCRIBE TABLE memory_facts",
        "DESCRIBE file('{canary}')",
    ]
))

SERVER_FUNCTIONS = _refused(
    "SELECT currentUser()", "SELECT hostName()", "SELECT FQDN()", "SELECT version()", "SELECT uptime()",
    "SELECT getSetting('readonly')", "SELECT getServerSetting('path')", "SELECT getMacro('x')",
    "SELECT filesystemAvailable()", "SELECT filesystemCapacity()", "SELECT currentDatabase()",
    "SELECT serverUUID()", "SELECT getOSKernelVersion()", "SELECT showCertificate()", "SELECT buildId()",
    "SELECT dictGet('d', 'x', 1)", "SELECT dictGetString('d', 'x', toUInt64(1))", "SELECT joinGet('j', 'x', 1)",
    "SELECT hasColumnInTable('system', 'users', 'name')", "SELECT sleep(3)", "SELECT sleepEachRow(1) FROM events",
    "SELECT getClientHTTPHeader('Authorization')", "SELECT queryID()", "SELECT globalVariable('max_allowed_packet')",
    "SELECT addressToSymbol(0)", "SELECT demangle('x')", "SELECT logTrace('x')", "SELECT catboostEvaluate('{canary}', 1)",
    "SELECT naiveBayesClassifier('m', 'x')", "SELECT regionToName(1)", "SELECT currentRoles()", "SELECT tcpPort()",
    "SELECT timeSeriesIdToTags(1)", "SELECT getMergeTreeSetting('index_granularity')",
)

STATEMENTS = _refused(
    "DROP TABLE events", "DROP TABLE IF EXISTS tool_calls", "DROP DATABASE default", "TRUNCATE TABLE events",
    "TRUNCATE events", "DELETE FROM events WHERE 1", "ALTER TABLE events DELETE WHERE 1",
    "ALTER TABLE events UPDATE kind = 'x' WHERE 1", "ALTER TABLE events ADD COLUMN x String",
    "UPDATE events SET kind = 'x' WHERE 1", "INSERT INTO events (raw) VALUES ('{}')",
    "INSERT INTO events SELECT * FROM events", "CREATE TABLE x (a Int8) ENGINE = Memory",
    "CREATE VIEW v AS SELECT * FROM system.users", "CREATE DATABASE pwn", "CREATE USER pwn",
    "CREATE FUNCTION f AS x -> x", "CREATE DICTIONARY d (x UInt64) PRIMARY KEY x SOURCE(FILE(path '{canary}')) LAYOUT(FLAT()) LIFETIME(0)",
    "RENAME TABLE events TO e2", "EXCHANGE TABLES events AND tool_calls", "OPTIMIZE TABLE tool_calls FINAL",
    "ATTACH TABLE x FROM '{target}' (a Int8) ENGINE = Log", "DETACH TABLE events", "UNDROP TABLE events",
    "GRANT ALL ON *.* TO default", "REVOKE SELECT ON events FROM default", "SET readonly = 0", "SET max_memory_usage = 0",
    "SET allow_ddl = 1", "SYSTEM STOP MERGES", "SYSTEM SHUTDOWN", "SYSTEM DROP DNS CACHE", "SYSTEM FLUSH LOGS",
    "SYSTEM RELOAD CONFIG", "KILL QUERY WHERE 1", "KILL MUTATION WHERE 1", "USE system", "SHOW TABLES",
    "SHOW DATABASES", "SHOW CREATE TABLE events", "SHOW USERS", "SHOW GRANTS", "SHOW PROCESSLIST", "SHOW SETTINGS LIKE '%'",
    "EXPLAIN SELECT 1", "EXPLAIN AST SELECT file('x')", "CHECK TABLE events", "WATCH events", "MOVE USER default TO x",
    "SELECT 1; DROP TABLE events", "SELECT 1; SELECT 2", "BEGIN TRANSACTION", "COMMIT",
    "SELECT 1 SETTINGS readonly = 0", "SELECT 1 SETTINGS max_execution_time = 0",
    "SELECT * FROM events SETTINGS max_memory_usage = 0", "SELECT * FROM (SELECT 1 SETTINGS max_threads = 1)",
    "SELECT 1 FORMAT JSON", "SELECT 1 FORMAT Native", "SELECT 1 FORMAT TabSeparatedRaw",
    "SELECT * FROM events FORMAT RawBLOB", "SELECT {p:String}", "SELECT * FROM events WHERE event_id = {e:String}",
    "", "   ", ";", "-- only a comment", "/* only a comment */",
    "SELECT 1 AS `a\n Function file`", "SELECT 1 AS `x\n TableIdentifier system.users`",
    "SELECT `fi\nle`('{canary}')", "SELECT 'a' AS \"b\n Set\"", "SELECT 1\x00", "SELECT '\x00'",
    "SELECT " + "(" * 5000 + "1" + ")" * 5000,
    "SELECT " + "1+" * 20000 + "1",
    "SELECT number FROM numbers(1000000) /* an unterminated comment must not hide the limits",
    "SELECT " + "'a'," * 40000 + "'a'",
)

BOUNDED = [
    Hostile(s, "bounded")
    for s in (
        "SELECT * FROM numbers(10000000000)",
        "SELECT count() FROM numbers(100000000000)",
        "SELECT number FROM numbers(1000000)",
        "SELECT groupArray(number) FROM numbers(200000000)",
        "SELECT groupArray(toString(number)) FROM numbers(100000000)",
        "SELECT count() FROM numbers(100000) AS a CROSS JOIN numbers(100000) AS b",
        "SELECT repeat('x', 1000000) FROM numbers(1000)",
        "SELECT range(100000000)",
        "SELECT arrayMap(x -> repeat('y', 1000), range(1000000))",
        "SELECT * FROM numbers_mt(10000000000)",
        "SELECT uniqExact(number) FROM numbers(1000000000)",
        "SELECT * FROM generate_series(1, 100000000000)",
        "SELECT number, number * 2, toString(number) FROM numbers_mt(1000000)",
        "SELECT count() FROM numbers(3000000000) WHERE number % 7 = 0",
        "SELECT number FROM numbers(1000000) -- a trailing comment must not hide the limits",
        "SELECT number FROM numbers(1000000) " + "-- x\n" * 10,
        "SELECT arrayMap(x -> [], range(21000000))",
    )
]

# Found by a red-team pass over the first sandbox: constructs whose calls the syntax tree
# does not print as Function lines, and structure strings that declare expressions.
HIDDEN_CALLS = _refused(
    "SELECT * APPLY(file) FROM (SELECT '{canary}' AS p)",
    "SELECT * APPLY(file) FROM (SELECT '/etc/hostname' AS p)",
    "SELECT COLUMNS('p') APPLY(file) FROM (SELECT '{canary}' AS p)",
    "SELECT * APPLY(x -> (SELECT groupArray(name) FROM system.settings)) FROM (SELECT 1 AS p)",
    "SELECT * APPLY(x -> (SELECT groupArray((project, key, value)) FROM memory_facts)) FROM (SELECT 1 AS p)",
    "SELECT * APPLY(sleep) FROM (SELECT 3 AS p)",
    "SELECT * APPLY(toString) APPLY(file) FROM (SELECT '{canary}' AS p)",
    "SELECT y FROM values('x String, y String ALIAS file(x)', '{canary}')",
    "SELECT y FROM values('x String, y String ALIAS currentUser() || hostName()', 'a')",
    "SELECT y FROM values('x String, y String DEFAULT file(x)', '{canary}')",
    "SELECT x FROM (SELECT 1 AS x) WHERE x IN default.memory_facts",
    "SELECT x FROM (SELECT 1 AS x) WHERE x IN default.memory_candidates",
    "SELECT serverTimezone()",
    "SELECT timezone()",
    "SELECT editDistance(repeat('a', 65000 + number), repeat('b', 65000)) FROM numbers(8)",
    "SELECT levenshteinDistance(repeat('a', 65000), repeat('b', 65000))",
    "SELECT damerauLevenshteinDistance('a', 'b')",
    "SELECT jaroWinklerSimilarity(repeat('a', 65000), repeat('b', 65000))",
    "SELECT arrayLevenshteinDistance(range(150000), range(150000, 300000))",
    "SELECT count() FROM numbers(20000) WHERE arrayLevenshteinDistance(range(1000), range(number, number + 1000)) > 0",
    "SELECT arrayLevenshteinDistanceWeighted(range(3), range(3), [1., 1, 1], [1., 1, 1])",
    "SELECT arraySimilarity(range(3), range(3), [1., 1, 1], [1., 1, 1])",
    "SELECT length(arrayFold((acc, x) -> arrayPushBack(acc, x), range(1000000), emptyArrayUInt64()))",
    "SELECT " + "[" * 40 + "(repeat('{\"a\":', 990) || '1' || repeat('}', 990))::JSON" + "]" * 40 + " AS j",
)

CORPUS: list[Hostile] = [
    *FILE_READS, *FILE_WRITES, *NETWORK, *SYSTEM_TABLES, *SERVER_FUNCTIONS, *STATEMENTS, *HIDDEN_CALLS, *BOUNDED,
]

ALLOWED = [
    "SELECT count() FROM events",
    "SELECT kind, count() FROM events GROUP BY kind ORDER BY kind",
    "SELECT tool_name, status, count(), quantile(0.99)(latency_ms) FROM tool_calls FINAL GROUP BY ALL",
    "SELECT reason, count() FROM rejected_events GROUP BY reason",
    "WITH recent AS (SELECT * FROM events WHERE kind = 'goal') SELECT count() FROM recent",
    "SELECT e.event_id, t.status FROM events AS e LEFT JOIN tool_calls AS t ON e.event_id = t.call_event_id",
    "SELECT countIf(kind = 'goal'), uniqExact(thread_id) FROM events",
    "SELECT JSONExtractString(payload, 'text') AS text FROM default.events WHERE kind = 'goal'",
    "SELECT arrayMap(x -> x + 1, [1, 2, 3]), toStartOfMinute(now()), lower('ABC')",
    "SELECT number FROM numbers(10) WHERE number IN (SELECT 3)",
    "SELECT event_id FROM events UNION ALL SELECT toString(number) FROM numbers(2)",
    "DESCRIBE events",
    "SELECT 1;",
    "SELECT 1;;",  # trailing semicolons end the one statement
    "select count() from events -- trailing comment",
    "SELECT 1 " + "-- x\n" * 10,
]
