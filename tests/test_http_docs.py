"""Issue 13, items 3 and 5: one OpenAPI document for both deployments, from FastAPI and the
pydantic models, and docs/http-api.md, whose route table is that document's. The document
promises only what the server sends: real answers are checked against its response models.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from agentlog.schemas.responses import Error, SearchAnswer, SqlAnswer, ThreadList, route_table
from agentlog.streams.api.http import build_app
from agentlog.streams.embedded.service import EmbeddedService
from agentlog.streams.publish_check import PublishReport
from tests.helpers import raw

DOC = Path(__file__).resolve().parent.parent / "docs" / "http-api.md"
TABLE = re.compile(r"(<!-- routes:begin -->\n)(.*?)(<!-- routes:end -->)", re.S)
JSON = {"Content-Type": "application/json"}
pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture
def document(service: EmbeddedService) -> dict[str, Any]:
    return build_app(service).openapi()


def test_the_route_table_of_docs_http_api_md_is_the_openapi_documents(document: dict[str, Any]) -> None:
    text = DOC.read_text()
    table = route_table(document)
    if os.environ.get("AGENTLOG_WRITE_DOCS"):
        text = TABLE.sub(lambda m: m[1] + table + m[3], text)
        DOC.write_text(text)
    found = TABLE.search(text)
    assert found is not None, "docs/http-api.md lost its <!-- routes:begin/end --> markers"
    assert found[2] == table, "docs/http-api.md is stale: AGENTLOG_WRITE_DOCS=1 pytest tests/test_http_docs.py"


def test_every_route_has_its_own_section_in_docs_http_api_md(document: dict[str, Any]) -> None:
    sections = set(re.findall(r"^### `(\w+) (\S+)`$", DOC.read_text(), flags=re.M))
    routes = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert sections <= routes, "a section names a route that does not exist"
    # One section per path (GET and POST /memory/status share theirs).
    assert {p for _, p in routes} - {p for _, p in sections} == set(), "a route has no section"


def test_the_document_says_400_for_a_refusal_never_fastapis_422(document: dict[str, Any]) -> None:
    codes = {code for ops in document["paths"].values() for op in ops.values() for code in op["responses"]}
    assert "422" not in codes and "400" in codes
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert {"SqlBody", "ConsolidateBody", "RevokeBody", "Error", "PublishReport"} <= set(document["components"]["schemas"])
    sql = document["paths"]["/sql"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert sql == {"$ref": "#/components/schemas/SqlBody"}


@pytest.fixture
def client(service: EmbeddedService) -> Iterator[TestClient]:
    with TestClient(build_app(service, background=service.run_forever), base_url="http://localhost") as client:
        yield client


def test_real_answers_are_what_the_response_models_document(client: TestClient) -> None:
    events = b"\n".join([raw("g1", "goal", {"text": "ship it"}, thread="t1"),
                         raw("m1", "message", {"role": "user", "text": "deploy the build"}, thread="t1"), b"{bad"])  # fmt: skip
    report = TypeAdapter(PublishReport).validate_python(client.post("/events", content=events, headers=JSON).json())
    assert (report.accepted, report.rejected, report.rejections[0]["record"]) == (2, 1, 3)
    assert client.post("/flush", headers=JSON).json() == {"ok": True}
    listing = ThreadList.model_validate(client.get("/threads").json())
    assert [(t.thread_id, t.event_count, t.goal) for t in listing.threads] == [("t1", 2, "ship it")]
    found = SearchAnswer.model_validate(client.get("/search", params={"q": "deploy", "thread": "t1"}).json())
    assert [h.event_id for h in found.hits] == ["m1"]
    sql = {"sql": "SELECT event_id, kind FROM events ORDER BY event_id"}
    rows = SqlAnswer.model_validate(client.post("/sql", json=sql).json())
    assert (rows.columns, rows.rows) == (["event_id", "kind"], [["g1", "goal"], ["m1", "message"]])
    for status, answer in ((404, client.get("/threads/nope/state")), (400, client.get("/search?limit=0")),
                           (400, client.post("/sql", json={"query": "SELECT 1"})), (405, client.get("/sql"))):  # fmt: skip
        assert answer.status_code == status and Error.model_validate(answer.json()).error
