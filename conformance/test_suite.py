"""The conformance suite as pytest items: one per (case, runner); see conformance/plugin.py."""
from conformance.plugin import check_item


def test_conformance(conformance_session, conformance_item, record_property):
    check_item(conformance_session, conformance_item, record_property)
