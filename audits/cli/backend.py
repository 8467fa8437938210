"""The `--backend`, `--ray-address` and `--max-retries` flags of the audit commands that run independent tasks
(`audit power`, `audit multi-run`; docs/scaling.md, "Audit sweeps on Ray"). Values are checked by
`audits.backends.check_backend`, before any work."""

from __future__ import annotations

from privcheck.cli_args import integer

__all__ = ["add_backend_arguments", "backend_kwargs"]


def add_backend_arguments(p) -> None:
    from audits.backends import DEFAULT_MAX_RETRIES

    p.add_argument("--backend", default="serial",
                   help="serial (default) or ray: run the independent tasks as Ray tasks (pip install "
                        "'privcheck[ray]')")
    p.add_argument("--ray-address", default=None,
                   help="with --backend ray: address of an existing Ray cluster (auto, HOST:PORT or "
                        "ray://HOST:PORT; default: a local ray.init())")
    p.add_argument("--max-retries", type=integer, default=DEFAULT_MAX_RETRIES,
                   help=f"retries of a failed task (Ray's max_retries; default {DEFAULT_MAX_RETRIES})")


def backend_kwargs(args) -> dict:
    """The validated backend, address and max_retries of parsed arguments (InvalidParameter before any work)."""
    from audits.backends import check_backend

    backend, address, max_retries = check_backend(args.backend, args.ray_address, args.max_retries)
    return {"backend": backend, "address": address, "max_retries": max_retries}
