"""The service: the Ray Serve application (`application.build_app`), its deployments (the
shared Reader, the knowledge Sources, thin RetrieverGroups, the Voter), the ingress (transport,
auth, metrics and the reply: `ingress.py`; Health in `health.py`), the remote calls of an Ask
under its Deadline (`handles.py`), the gRPC fronts and wire format, and the Prometheus metrics.
Only wiring: the retrieval, the vote and the rounds are the core's, `serve.orchestrator`'s and
`serve.ensemble`'s."""
