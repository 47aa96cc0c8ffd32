"""The analyst SQL sandbox: one read-only query over the promised tables, bounded.

``readonly=1`` alone is no sandbox (it allows ``file()``, ``INTO OUTFILE``, ``system.*``
and unbounded work), so a statement is judged on the engine's own parse of it: ClickHouse's
``EXPLAIN AST`` prints the syntax tree, one node a line, and :class:`SqlPolicy` reads that
text. Nothing here is a regex over SQL: quoting, comments and case are the parser's.

The policy is pure (no I/O): it gets the tree text and the catalogue of functions the
engine reports, and answers with the reason a statement is refused, or nothing.

Why a per-line reading is enough: a node's own line (``Function file``, ``TableIdentifier
system.users``) is printed by the engine, one per node, at its true depth. An alias or a
quoted name holding a line break can add lines that look like nodes, but never remove or
move a real one, so a forged line can only make the policy refuse more, never less.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agentlog.sinks.base import StoreError

PROMISED_TABLES = frozenset({"events", "tool_calls", "rejected_events"})
"""What analysts can rely on (the contract's ClickHouse tables); nothing else is readable."""

EXPLAIN_FORMAT = "TabSeparatedRaw"
"""The format the sandbox itself appends to the EXPLAIN; the user's text may name none."""

STATEMENTS = frozenset({"SelectWithUnionQuery", "DescribeQuery"})
"""A SELECT (WITH, UNION, INTERSECT, EXCEPT, subqueries, joins) or a DESCRIBE of a table."""

NODES = frozenset({
    "ArrayJoin", "Asterisk", "ColumnsExceptTransformer", "ColumnsListMatcher", "ColumnsRegexpMatcher",
    "ColumnsReplaceTransformer", "ColumnsTransformerList", "DescribeQuery", "ExpressionList", "Function",
    "Identifier", "InterpolateElement", "Literal", "OrderByElement", "QualifiedAsterisk",
    "QualifiedColumnsListMatcher", "QualifiedColumnsRegexpMatcher", "SampleRatio",
    "SelectIntersectExceptQuery", "SelectQuery", "SelectWithUnionQuery", "Subquery", "TableExpression",
    "TableIdentifier", "TableJoin", "TablesInSelectQuery", "TablesInSelectQueryElement",
    "WindowDefinition", "WindowListElement", "WithElement",
})  # fmt: skip
"""The syntax nodes a sandboxed statement may hold, and nothing else: a node the policy does
not know (``* APPLY(f)``'s transformer prints no ``Function`` line for ``f``; ``SETTINGS``,
query parameters) could hide what it calls, so it is refused, not passed over."""

SAFE_CATEGORIES = frozenset({
    "Aggregate Functions", "Arithmetic", "Arrays", "Bit", "Bitmap", "Comparison", "Conditional",
    "Dates and Times", "Distance", "Encoding", "Encryption", "Financial", "Geo", "Geo Polygon",
    "Hash", "IP Address", "JSON", "Logical", "Map", "Mathematical", "Null", "NumericIndexedVector",
    "QBit", "Random Number", "Rounding", "String", "String Replacement", "String Search",
    "String Splitting", "Time Window", "Tuple", "Type Conversion", "URL", "UUID",
})  # fmt: skip
"""Categories of the engine's catalogue whose functions compute on their arguments alone.
Left out: Other (server, session and file introspection live there), Dictionary, Embedded
Dictionary, AI (network calls), Introspection, Machine Learning (model files), Internal,
Time Series (a global tag store)."""

SAFE_OTHER = frozenset({
    "bar", "blockNumber", "blockSize", "byteSize", "countDigits", "defaultValueOfArgumentType",
    "defaultValueOfTypeName", "digits", "errorCodeToName", "finalizeAggregation", "flipCoordinates",
    "formatReadableDecimalSize", "formatReadableQuantity", "formatReadableSize",
    "formatReadableTimeDelta", "geoDistance", "getSizeOfEnumType", "getSubcolumn",
    "greatCircleAngle", "greatCircleDistance", "identity", "ignore", "indexHint",
    "initializeAggregation", "isConstant", "isDecimalOverflow", "lowCardinalityIndices",
    "lowCardinalityKeys", "MACNumToString", "MACStringToNum", "MACStringToOUI", "materialize",
    "minSampleSizeContinuous", "minSampleSizeConversion", "neighbor", "parseISO8601Duration",
    "parseReadableSize", "parseReadableSizeOrNull", "parseReadableSizeOrZero", "parseTimeDelta",
    "pointInEllipses", "pointInPolygon", "readWKB", "readWKT", "rowNumberInAllBlocks",
    "rowNumberInBlock", "runningAccumulate", "runningDifference",
    "runningDifferenceStartingWithFirstValue", "throwIf", "toColumnTypeName", "toTypeName",
    "transform", "variantElement", "variantType", "visibleWidth", "wkb", "wkt",
})  # fmt: skip
"""Pure functions of the catalogue's "Other" category, named one by one."""

SAFE_OTHER_PREFIXES = ("h3", "geohash", "rand", "color")

SYNTAX_FUNCTIONS = frozenset({"lambda", "exists", "grouping", "tuple", "array"})
"""Names the parser gives to syntax (``x -> y``, ``EXISTS (...)``) rather than to catalogue entries."""

TABLE_FUNCTIONS = frozenset({
    "numbers", "numbers_mt", "generate_series", "generateSeries", "primes", "view",
})  # fmt: skip
"""Table functions that make rows from their arguments alone (``view``'s inner query is
part of the same tree, and judged with it). Every file, URL, remote, database, dictionary
and ``merge`` table function is refused, and so is ``values``: its structure string may
declare ``ALIAS`` columns, expressions the tree shows only as a string literal."""

COSTLY = frozenset({
    "editDistance", "editDistanceUTF8", "levenshteinDistance", "levenshteinDistanceUTF8",
    "damerauLevenshteinDistance", "jaroSimilarity", "jaroWinklerSimilarity",
    "arrayLevenshteinDistance", "arrayLevenshteinDistanceWeighted", "arraySimilarity", "arrayFold",
    "serverTimezone", "serverTimeZone", "timezone", "timeZone",
})  # fmt: skip
"""Refused although their category is safe: string and array distances cost the product
of their arguments' lengths within one row, and ``arrayFold`` copies its accumulator at
every element (an array grown by ``arrayPushBack``: the square of its length), which no
time limit interrupts (the engine checks it between blocks); the server's time zone is
server information."""

HIDDEN_DATABASES = frozenset({"system", "information_schema", "INFORMATION_SCHEMA"})
"""Always refused, even on an engine that does not list them."""

_NODE = re.compile(r"^(?P<indent> *)(?P<kind>[A-Za-z]+)(?: (?P<rest>.*))?$")
_ALIAS_OR_COUNT = re.compile(r" \((?:alias .*|children \d+)\)$")


def _bare_name(rest: str) -> str:
    """A node's name without its ``(alias ...)`` and ``(children N)``. Only a line ending
    in ')' can hold either: on any other, the pattern would read to the end from every
    " (alias " it holds (quadratic on a literal full of them)."""
    for _ in range(2):
        if rest.endswith(")"):
            rest = _ALIAS_OR_COUNT.sub("", rest)
    return rest.strip()


class SqlRefused(StoreError):
    """The statement is not one the sandbox runs; the message says what to do."""


class SqlBusy(StoreError):
    """Another analyst query holds the sandbox's connection; try again shortly."""


@dataclass(frozen=True)
class SqlLimits:
    """What one analyst query may cost; each is a ClickHouse query-level setting."""

    timeout_seconds: float = 10.0
    max_result_rows: int = 100_000
    max_result_bytes: int = 64 * 1024 * 1024
    max_memory_bytes: int = 1024 * 1024 * 1024
    max_rows_to_read: int = 2_000_000_000
    max_query_chars: int = 100_000

    def settings_clause(self, readonly: bool = True) -> str:
        """A trailing SETTINGS clause: per query, so no session state is left behind.
        ``readonly`` comes last, as it forbids changing the settings after it; a server's
        restricted user (``readonly = 2`` in its profile) sets it there instead."""
        settings = {
            "max_execution_time": f"{self.timeout_seconds:g}",
            "timeout_overflow_mode": "'throw'",
            "max_result_rows": str(self.max_result_rows),
            "max_result_bytes": str(self.max_result_bytes),
            "result_overflow_mode": "'throw'",
            "max_memory_usage": str(self.max_memory_bytes),
            "max_rows_to_read": str(self.max_rows_to_read),
            "read_overflow_mode": "'throw'",
            # Numbers as JSON numbers, not strings: results decode to the column's type.
            "output_format_json_quote_64bit_integers": "0",
            "output_format_json_quote_64bit_floats": "0",
            "output_format_json_quote_decimals": "0",
        }
        if readonly:
            settings["readonly"] = "1"
        return "SETTINGS " + ", ".join(f"{k} = {v}" for k, v in settings.items())

    def explain(self, code: str) -> str | None:
        """What to say when the engine stops a query with error ``code`` for a limit."""
        limits = {
            "TIMEOUT_EXCEEDED": f"the query ran past the sandbox's {self.timeout_seconds:g} s "
            "(AGENTLOG_SQL_TIMEOUT_SECONDS)",
            "TOO_MANY_ROWS_OR_BYTES": f"the result is over the sandbox's {self.max_result_rows:,} rows or "
            f"{self.max_result_bytes:,} bytes (AGENTLOG_SQL_MAX_ROWS, AGENTLOG_SQL_MAX_BYTES)",
            "MEMORY_LIMIT_EXCEEDED": f"the query needs more than the sandbox's {self.max_memory_bytes:,} bytes "
            "of memory (AGENTLOG_SQL_MAX_MEMORY_BYTES)",
            "TOO_MANY_ROWS": f"the query would read more than {self.max_rows_to_read:,} rows "
            "(AGENTLOG_SQL_MAX_ROWS_TO_READ)",
            "TOO_MANY_BYTES": "the query would read more bytes than the sandbox allows",
        }
        why = limits.get(code)
        if why is None:
            return None
        return f"{why}; narrow it with WHERE, LIMIT or an aggregate, or raise the limit"


@dataclass(frozen=True)
class FunctionEntry:
    category: str
    aggregate: bool
    canonical: str = ""


@dataclass(frozen=True)
class FunctionCatalogue:
    """The engine's functions (``system.functions``) and aggregate combinators, by name."""

    entries: Mapping[str, FunctionEntry]
    lowercase: Mapping[str, str]
    combinators: tuple[str, ...]

    @classmethod
    def of(
        cls, rows: Iterable[tuple[str, bool, bool, str, str]], combinators: Iterable[str]
    ) -> FunctionCatalogue:
        """``rows``: (name, is_aggregate, case_insensitive, alias_to, categories)."""
        table = list(rows)
        raw = {name: (bool(agg), alias, cats) for name, agg, _ci, alias, cats in table}
        entries: dict[str, FunctionEntry] = {}
        for name, (agg, alias, cats) in raw.items():
            target = raw.get(alias) if alias else None
            category = cats or (target[2] if target else "")
            entries[name] = FunctionEntry(category, agg or bool(target and target[0]), alias or name)
        lowercase = {name.lower(): name for name, _a, ci, _al, _c in table if ci}
        ordered = tuple(sorted(combinators, key=len, reverse=True))  # MergeState before State
        return cls(entries, lowercase, ordered)

    def lookup(self, name: str) -> FunctionEntry | None:
        entry = self.entries.get(name) or self.entries.get(self.lowercase.get(name.lower(), ""))
        if entry is not None:
            return entry
        for suffix in self.combinators:  # sumIf, uniqExactState, quantilesMergeIf ...
            if suffix and name.endswith(suffix) and len(name) > len(suffix):
                base = self.lookup(name[: -len(suffix)])
                if base is not None and base.aggregate:
                    return base
        return None


@dataclass(frozen=True)
class SqlPolicy:
    """What a sandboxed statement may read and call.

    ``existing_tables``: the tables of the current ``database`` (a name that is none of
    them is a WITH name); ``other_databases``: every other database the engine has."""

    catalogue: FunctionCatalogue
    database: str
    existing_tables: frozenset[str]
    other_databases: frozenset[str] = frozenset()
    tables: frozenset[str] = PROMISED_TABLES

    def check(self, tree: str) -> None:
        """Raise :class:`SqlRefused` unless ``tree`` (``EXPLAIN AST`` text) is a statement
        the sandbox runs."""
        lines = tree.rstrip("\n").split("\n")
        nodes = [self._node(line) for line in lines]
        depth, kind, _ = nodes[0]
        if depth != 0 or kind not in STATEMENTS:
            raise SqlRefused(
                f"only one read-only SELECT (or DESCRIBE) is allowed, not {_statement_name(kind)}; "
                f"the tables are {', '.join(sorted(self.tables))}"
            )
        self._check_clauses([(k, r) for d, k, r in nodes if d == 1])
        for _depth, kind, rest in nodes[1:]:
            if kind not in NODES:
                raise SqlRefused(f"this construct is not allowed in the SQL sandbox: {_construct(kind)}")
            self._check_node(kind, rest)

    @staticmethod
    def _node(line: str) -> tuple[int, str, str]:
        match = _NODE.match(line)
        if match is None:
            raise SqlRefused("names and aliases may not hold line breaks or control characters")
        return len(match["indent"]), match["kind"], match["rest"] or ""

    @staticmethod
    def _check_clauses(top: list[tuple[str, str]]) -> None:
        """The statement's own clauses: its queries first, the sandbox's FORMAT last."""
        for kind, rest in top[1:-1]:
            if kind == "Literal":
                raise SqlRefused("INTO OUTFILE is not allowed: results come back to you, never to a file")
            if kind == "Set":
                raise SqlRefused("SETTINGS are not allowed: the sandbox sets its own limits")
            if kind == "Identifier":
                raise SqlRefused("FORMAT is not allowed here: use --format table|json|csv")
            raise SqlRefused(f"this clause is not allowed: {kind} {rest}".strip())
        if not top or top[-1] != ("Identifier", EXPLAIN_FORMAT):
            raise SqlRefused("FORMAT is not allowed here: use --format table|json|csv")

    def _check_node(self, kind: str, rest: str) -> None:
        name = _bare_name(rest)
        if kind == "Set":
            raise SqlRefused("SETTINGS are not allowed: the sandbox sets its own limits")
        if kind == "Function":
            self._check_function(name)
        elif kind == "TableIdentifier":
            self._check_table(name)
        elif kind == "Identifier":
            self._check_identifier(name)

    def _check_function(self, name: str) -> None:
        if name in TABLE_FUNCTIONS or name in SYNTAX_FUNCTIONS:
            return
        entry = self.catalogue.lookup(name)
        if name in COSTLY or (entry is not None and entry.canonical in COSTLY):
            raise SqlRefused(f"function {name!r} is not allowed in the SQL sandbox (its cost within one row "
                             "is unbounded, or it tells about the server)")  # fmt: skip
        if entry is not None and (
            entry.aggregate
            or entry.category in SAFE_CATEGORIES
            or name in SAFE_OTHER
            or name.startswith(SAFE_OTHER_PREFIXES)
        ):
            return
        raise SqlRefused(
            f"function {name!r} is not allowed in the SQL sandbox (no file, network, server or "
            "session access); use the functions that compute on your columns"
        )

    def _check_table(self, name: str) -> None:
        database, _, table = name.partition(".") if "." in name else ("", "", name)
        if database in ("", self.database) and table in self.tables:
            return
        if database == "" and table not in self.existing_tables and not _names_a_file(table):
            return  # a WITH name (the engine refuses a table that does not exist)
        raise SqlRefused(f"table {name!r} is not readable; the tables are {', '.join(sorted(self.tables))}")

    def _check_identifier(self, name: str) -> None:
        """Mostly columns, but ``x IN some_table`` names a table with an Identifier: a name
        that is a table, or sits in another database, must be a promised table."""
        first, dot, rest = name.partition(".")
        hidden = dot and (first in HIDDEN_DATABASES or first in self.other_databases)
        table = rest if dot and first == self.database else name
        if hidden or (table in self.existing_tables and table not in self.tables):
            raise SqlRefused(f"{name!r} is not readable; the tables are {', '.join(sorted(self.tables))}")


def _names_a_file(table: str) -> bool:
    """A name no table of ours has and that the embedded engine would look for as a file
    (a path, or a name too long for one): refused here with the tables there are, instead
    of the engine's read-only or file-system error (which named the server's directory)."""
    return "/" in table or "\\" in table or len(table.encode()) > 255


def _construct(kind: str) -> str:
    known = {"ColumnsApplyTransformer": "APPLY", "Set": "SETTINGS", "QueryParameter": "query parameters"}
    return known.get(kind, kind)


def _statement_name(kind: str) -> str:
    words = re.sub(r"(?<!^)(?=[A-Z])", " ", kind.removesuffix("Query")).upper()
    return words or "an empty statement"


_POSITION = re.compile(r"position (\d+)")
_LINE = re.compile(r"\(line (\d+), col (\d+)\)")
_ENGINE_CODE = re.compile(r"^Code: \d+\. DB::Exception: ")
_AT_OWN_FORMAT = re.compile(rf"\(line \d+, col \d+\): FORMAT {EXPLAIN_FORMAT}\b")
"""A failure whose quoted text starts at the parse's own FORMAT clause."""


def user_syntax_error(message: str, prefix: str, length: int) -> str:
    """The engine's syntax error about ``prefix + user_sql + suffix``, in the user's terms:
    positions count from the start of their text, and a failure in the sandbox's own
    suffix (past the user's last character) says what the sandbox runs."""
    message = _ENGINE_CODE.sub("", message).removesuffix(" (SYNTAX_ERROR)")
    position = _POSITION.search(message)
    # Past the user's last character (the engine counts from 1), or at the parse's own
    # FORMAT clause (after a second statement the engine counts from elsewhere): the
    # sandbox's words, never quoted.
    if (position is not None and int(position[1]) > len(prefix) + length) or _AT_OWN_FORMAT.search(message):
        expected = message.partition("Expected")[2].strip().rstrip(".")
        hint = f" (the parser expected {expected[:300].removeprefix('one of: ')})" if expected else ""
        return (
            "Syntax error at the end of the query: the sandbox runs one SELECT (or DESCRIBE), "
            f"complete, with no FORMAT, SET or SYSTEM clause{hint}"
        )
    # Every position the engine names (the failure's, an unclosed bracket's) is in the user's text.
    shift_chars, shift_lines = len(prefix), prefix.count("\n")
    message = _POSITION.sub(lambda m: f"position {max(1, int(m[1]) - shift_chars)}", message)
    return _LINE.sub(lambda m: f"(line {max(1, int(m[1]) - shift_lines)}, col {m[2]})", message)


__all__ = [
    "EXPLAIN_FORMAT", "FunctionCatalogue", "FunctionEntry", "PROMISED_TABLES", "SqlBusy", "SqlLimits",
    "SqlPolicy", "SqlRefused", "user_syntax_error",
]  # fmt: skip
