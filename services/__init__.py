"""Parley's service layer: what a request does, for every mode, without HTTP.

Each mode's module checks a request, plans and reserves what it costs (`billing`: credit and token allowance,
reserved, settled when the run ends, in one place for every mode) and starts its run on the run engine
(`engine.ParleyRunEngine`: the engine with Parley's modes and billing). `api/` routes and `cli/` commands both call
them; they raise `errors.ServiceError`s, which `api.errors` maps to HTTP statuses and the CLI prints. Nothing
here imports FastAPI, Starlette or `api/`; `runs/` imports nothing of here.
"""
