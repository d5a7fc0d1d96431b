"""The test suite's own arrangement (``tests/conftest.py``)."""
from __future__ import annotations


def test_the_slow_tests_are_handed_out_first(request):
    """Every test marked ``slow`` comes before every other in the order the workers take them
    (``pytest_collection_modifyitems``), and the browser's report build, the longest, is marked."""
    items = request.session.items
    slow = [item.get_closest_marker("slow") is not None for item in items]
    assert slow == sorted(slow, reverse=True)
    assert request.node in items and not slow[items.index(request.node)]
    from test_report import test_the_report_builds_from_the_shipped_records_and_opens_in_a_real_browser as browser

    assert any(mark.name == "slow" for mark in getattr(browser, "pytestmark", []))
