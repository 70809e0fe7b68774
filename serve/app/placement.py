"""Where the deployments run: their Ray actor options (the thin default, and the custom
resources `service.placement` asks of each, so a cluster's config says which node serves
what) and, for Health, the node each deployment's replica answers from. The deployments' names,
which `service.placement` may use, are the config's (serve/config.py: DEPLOYMENTS, deployment_names).

    service:
      ray_address: 10.0.0.1:6379          # a running cluster (empty: Ray on this machine)
      placement:                          # deployment -> Ray resources it needs on its node
        Reader: {eor_reader: 1}
        Reader_1.5B: {eor_reader: 1}        # a reader a pool member names (`Wiki@10~1.5B`)
        Retrievers: {eor_retrievers: 0.01}  # every retriever actor (Retrievers_0, _1, ...)
"""
from __future__ import annotations

from typing import Any

THIN = {"num_cpus": 0}  # every deployment but the engines' work: the reader's threads are its own


def actor_options(placement: dict[str, dict[str, float]], deployment: str, base: dict | None = None) -> dict:
    """`base` (default THIN) plus the custom resources the config places `deployment` with."""
    out = dict(THIN if base is None else base)
    key = "Retrievers" if deployment.startswith("Retrievers_") else deployment
    if placement.get(key):
        out["resources"] = {**out.get("resources", {}), **{str(k): float(v) for k, v in placement[key].items()}}
    return out


class Placed:
    """Mixed into every deployment: which Ray node this replica runs on (Health shows it)."""

    async def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def node_labels() -> dict[str, str]:
    """Ray node id -> "<id prefix> <address> [<custom resources>] (head)", for Health."""
    import ray

    if not ray.is_initialized():  # a deployment's replica always is; a unit test's fake may not be
        return {}
    out = {}
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        custom = sorted(k for k in n.get("Resources", {}) if not k.startswith("node:") and k not in
                        ("CPU", "GPU", "memory", "object_store_memory", "accelerator_type"))
        head = " head" if "node:__internal_head__" in n.get("Resources", {}) else ""
        out[n["NodeID"]] = f"{n['NodeID'][:8]} {n.get('NodeManagerAddress', '')}{head}" + \
            (f" [{', '.join(custom)}]" if custom else "")
    return out


async def placements(parts: list[tuple[str, Any]], timeout_s: float = 2.0) -> list[str]:
    """"<deployment>: <node>" for each (name, handle) that answers within `timeout_s`."""
    import asyncio

    async def where(handle: Any) -> str | None:
        try:
            return await asyncio.wait_for(_await(handle.node.remote()), timeout_s)
        except Exception:
            return None

    nodes = await asyncio.gather(*[where(h) for _, h in parts])
    labels = node_labels()
    return [f"{name}: {labels.get(n, n[:8])}" for (name, _), n in zip(parts, nodes) if n]


async def _await(response: Any) -> Any:
    return await response
