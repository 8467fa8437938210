"""Integrations: bind privcheck's checks and audits to training libraries users already run.

Each integration is its own module (``privcheck.integrations.opacus``, ``privcheck.integrations.trl``) and imports
its library lazily, so importing this package never needs Opacus, TRL or torch.
"""

__all__: list[str] = []
