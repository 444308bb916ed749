"""The JSON API's OpenAPI document (``GET /api/openapi.json``), made from the API's own
routes, so that no route goes undocumented: each has its line in ``SUMMARIES``."""
from __future__ import annotations

import re
from typing import Any

#: What each route does, by (method, path as routed).
SUMMARIES = {
    ("GET", "/api/stats"): "Counts by status, each live pool's counters, unserved jobs and "
                           "paused queues (as jobpool status --json)",
    ("GET", "/api/jobs"): "A page of jobs, newest first (a chain oldest first): "
                          "{jobs, more, next_after}; meta=KEY=VALUE (repeated: every pair) "
                          "filters by metadata; a search (group, error, args, a time "
                          "range; metadata where the store has no index for it) reads a window "
                          "of scan ids and adds searched: {from_id, to_id}",
    ("POST", "/api/jobs"): "Enqueue by name: {name, args, kwargs} and queue, key, delay, "
                           "priority, max_attempts; 201 {ok, result, id, duplicate}",
    ("GET", "/api/jobs/{job_id:int}"): "One job's row with its attempt_log",
    ("POST", "/api/jobs/bulk"): "An action on chosen jobs: {action: retry, cancel, delete or "
                                "run-now, ids: [...]} (at most 1000); {ok, result, jobs: what "
                                "became of each id, note: of retried batch members no "
                                "callback follows}; 409 when none changed",
    ("GET", "/api/periodic"): "Each periodic job: schedule and queue (with jobpool web --app), "
                              "last enqueued occurrence and its job, next occurrence",
    ("GET", "/api/rollups"): "The pools' per-minute rollups over the last hours (1 to 72, "
                             "default 3) of one name or all: {minutes: [{minute, done, "
                             "retried, dead, latency, run_time}], names: {name: the window's "
                             "totals}}; latency and run_time are {count, mean, p50, p95, max, "
                             "buckets} in seconds",
    ("DELETE", "/api/jobs/{job_id:int}"): "Delete a dead job",
    ("POST", "/api/jobs/{job_id:int}/retry"): "Retry a dead job under its id, fresh attempts "
                                               "(a note when no callback of its batch "
                                               "follows: finished, or cancelled)",
    ("POST", "/api/jobs/{job_id:int}/cancel"): "Cancel a ready job (dead now) or a running one "
                                               "(its pool kills it)",
    ("POST", "/api/jobs/{job_id:int}/run-now"): "A scheduled or retrying job due now, its "
                                                "attempts kept (R51)",
    ("GET", "/api/pools"): "Every pool row, a dead one with why",
    ("POST", "/api/pools/{owner:path}/scale"): "Ask the pool to run {procs: N} children",
    ("POST", "/api/pools/{owner:path}/stop"): "Ask the pool to stop gracefully",
    ("GET", "/api/batches"): "The newest batches (open=1: those whose callbacks have not fired)",
    ("GET", "/api/batches/{batch_id:int}"): "A batch's status and its members by status",
    ("POST", "/api/batches/{batch_id:int}/cancel"): "Cancel a batch: no callback fires, its "
                                                    "ready members are dead",
    ("GET", "/api/queues"): "Each queue's counts (those named in its counts' capped list "
                            "stopped at 10 000: at least that many), pause and limit; the "
                            "limits of job names with their groups and tokens",
    ("POST", "/api/queues/{queue:path}/pause"): "Pause a queue on every pool",
    ("POST", "/api/queues/{queue:path}/resume"): "Resume a paused queue",
    ("POST", "/api/queues/{queue:path}/limit"): "Set the queue's limit: {running: N}, at most "
                                                "N of its jobs running at once across every "
                                                "pool (as jobpool limits set)",
    ("DELETE", "/api/queues/{queue:path}/limit"): "Clear the queue's limit (as jobpool limits "
                                                  "clear); 409 when it had none",
    ("GET", "/api/openapi.json"): "This document",
}

#: The query parameters each listing takes.
QUERY = {
    "/api/jobs": ("status", "name", "queue", "chain", "limit", "after", "key", "batch",
                  "group", "error", "args", "created_from", "created_to", "finished_from",
                  "finished_to", "meta", "scan"),
    "/api/batches": ("open", "limit"),
    "/api/rollups": ("hours", "name"),
}

_PARAMETER = re.compile(r"\{(\w+)(?::\w+)?\}")


def document(routes: list[Any]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (``KeyError`` for one without a summary)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        shown = _PARAMETER.sub(r"{\1}", route.path)
        for method in sorted(route.methods - {"HEAD"}):
            operation: dict[str, Any] = {
                "summary": SUMMARIES[(method, route.path)],
                "responses": _responses(method)}
            parameters = [{"name": name, "in": "path", "required": True,
                           "schema": {"type": "integer" if ":int" in route.path else "string"}}
                          for name in _PARAMETER.findall(route.path)]
            parameters += [{"name": name, "in": "query", "required": False,
                            "schema": {"type": "string"}} for name in QUERY.get(route.path, ())
                           if method == "GET"]
            if parameters:
                operation["parameters"] = parameters
            if method in ("POST", "DELETE"):
                operation["requestBody"] = {"required": False, "content": {
                    "application/json": {"schema": {"type": "object"}}}}
            paths.setdefault(shown, {})[method.lower()] = operation
    return {"openapi": "3.1.0",
            "info": {"title": "jobpool web API", "version": "1"},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}],
            "paths": paths}


def _responses(method: str) -> dict[str, Any]:
    if method == "GET":
        return {"200": {"description": "JSON"}, "401": {"description": "no bearer token"}}
    return {"200": {"description": "{ok: true, result}"},
            "400": {"description": "a body that is not what the call takes"},
            "401": {"description": "no bearer token"},
            "403": {"description": "the dashboard is read-only"},
            "409": {"description": "{ok: false, result}: the store's refusal, in its words"},
            "415": {"description": "not application/json"}}
