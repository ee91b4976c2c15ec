"""REST API of evolution under /api/v1/evolution/ (project API keys), one module per concern: `targets` (agent
repositories and their config, hot-swap releases and rollback), `jobs` (start for an insight or ticket, list, follow,
cancel, approve or discard the candidate, mark merged) and the artifacts a job's stages wrote; `common` holds what
both share.

One class per operation: look objects up in the key's project (another project's id is a 404), validate the body,
call the service, serialize. Approvals made with an API key are recorded as the key owner's.
"""
