"""The service: the Ray Serve application (`application.build_app`), its deployments (the
shared Reader, the knowledge Sources, thin RetrieverGroups, the Voter), the ingress that runs
one Ask through the cascade (`ingress.py`; Health in `health.py`, deadlines on remote calls in
`handles.py`), the gRPC fronts and wire format, and the Prometheus metrics.
Only wiring: the retrieval, the vote and the stage orchestration are the core's and
`serve.ensemble`'s."""
