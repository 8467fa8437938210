"""The claim-curve f-DP block of a sealed one-run document recomputed from what the document records
(audits.statistics.both_bounds): shared by the unit test and the end-to-end audit tests."""

from __future__ import annotations

import json

from audits.statistics import fdp_claim
from audits.statistics.report import FDP_BLOCK
from privcheck.accounting import event_from_json


def block_event(doc: dict):
    """The event the block's `claim_family:<event JSON>` assumption names."""
    label = doc["result"][FDP_BLOCK]["assumption"]
    assert label.startswith(fdp_claim.CLAIM_FAMILY_PREFIX)
    return event_from_json(json.loads(label[len(fdp_claim.CLAIM_FAMILY_PREFIX):]))


def recomputed(doc: dict) -> dict:
    """`fdp_claim.claim_eps_lower` of the document's recorded counts (m_test, guesses, correct), claim δ and level
    (significance / n_hypotheses), against the event its block names: what the block must equal."""
    res = doc["result"]
    level = res["significance"] / doc["guessing"]["n_hypotheses"]
    return fdp_claim.claim_eps_lower(doc["canaries"]["m_test"], res["guesses"], res["correct"], block_event(doc),
                                     doc["claim"]["delta"], level)


def assert_block_recomputes(doc: dict) -> None:
    block, out = doc["result"][FDP_BLOCK], recomputed(doc)
    assert (block["eps_lower"], block["noise_scale"]) == (out["eps_lower"], out["s"])
    assert (block["rejects_nominal"], block["search_capped"]) == (out["rejects_nominal"], out["search_capped"])
