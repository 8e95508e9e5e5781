"""The done event's confidence and risk fields, from a real model."""

import math

from engine.routing.risk import risk_flags

from .helpers import turn


def test_done_carries_confidence_report_and_risk(assistant):
    cid = assistant.new_conversation()
    question = "What dosage of ibuprofen should I take for a headache?"
    done = turn(assistant, cid, question, max_tokens=24)
    report = done.stats.confidence
    assert math.isclose(report["geo_mean_prob"], math.exp(sum(done.logprobs) / len(done.logprobs)), rel_tol=1e-9)
    assert isinstance(report["low"], bool) and isinstance(report["weak_spans"], list)
    # The question alone is medical; the answer's own words may add a category (free-running text
    # differs with the CPU's kernels): the flags are the question's and the answer's, whatever it said.
    assert risk_flags(question) == ["medical"]
    assert done.stats.risk["flags"] == risk_flags(question, done.text) and done.stats.risk["caution"]
    plain = turn(assistant, cid, "Thanks!", max_tokens=8)
    # The answer counts too (a base model may ramble into a risky topic).
    assert plain.stats.risk["flags"] == risk_flags("Thanks!", plain.text)
