"""The services' errors become HTTP errors in one place (`api.errors.service_error`)."""

from __future__ import annotations

import pytest

from parley.api.errors import error_body, service_error
from parley.services.errors import (CannotStart, Conflict, InvalidRequest, NotFound, PaymentRequired, RateLimited, RunFailed,
                             Unprocessable)


@pytest.mark.parametrize(("error", "status"), [
    (InvalidRequest("bad"), 400), (PaymentRequired("poor"), 402), (NotFound("gone"), 404), (Conflict("taken"), 409),
    (Unprocessable("odd"), 422), (RateLimited("slow down", retry_after=7), 429), (CannotStart("stuck"), 500),
])
def test_each_kind_has_its_status(error, status):
    assert service_error(error).status == status


def test_a_narrower_code_and_details_reach_the_body():
    err = service_error(Unprocessable("2 problems", code="invalid_workflow", errors=[{"path": "$.nodes"}]))
    assert error_body("/v1/workflows", err) == {"error": "2 problems", "code": "invalid_workflow",
                                                "errors": [{"path": "$.nodes"}]}


def test_a_rate_limit_says_when_to_retry():
    assert service_error(RateLimited("slow down", retry_after=7)).headers == {"Retry-After": "7"}


def test_a_seed_message_keeps_the_seed_body_unless_the_service_named_a_code():
    assert error_body("/v1/conversations/c1/message", service_error(NotFound("Conversation not found"))) == {
        "error": "Conversation not found"}
    named = service_error(Unprocessable("No agents found. Please create agents first.", code="no_agents"))
    assert error_body("/v1/workflows/runs", named)["code"] == "no_agents"


def test_a_failed_run_answers_with_its_own_status_and_names_the_run():
    err = service_error(RunFailed({"message": "node failed", "status": 502, "code": "workflow_failed",
                                   "node": "n1"}, run_id="wfr_1"))
    assert (err.status, err.code, err.extra, err.headers) == (502, "workflow_failed", {"node": "n1"},
                                                              {"X-Run-Id": "wfr_1"})
