"""ovs_rdt.agent.lasting: an error logged once while it lasts."""
from __future__ import annotations

import logging

from ovs_rdt.agent.lasting import LastingError

LOG = logging.getLogger('test.lasting')


def _lines(caplog) -> list[tuple[str, str]]:
    out = [(r.levelname, r.getMessage()) for r in caplog.records
           if r.name == LOG.name]
    caplog.clear()
    return out


def test_once_on_failure_once_on_recovery_again_on_a_new_failure(
        caplog) -> None:
    caplog.set_level(logging.INFO)
    err = LastingError(LOG)
    assert err.recover('works again') is False     # never failed: silent
    assert _lines(caplog) == []
    assert err.fail('disk gone', 'cannot read: %s (retrying)', 'disk gone')
    for _ in range(5):
        assert not err.fail('disk gone', 'cannot read: %s (retrying)',
                            'disk gone')
    assert _lines(caplog) == [('ERROR', 'cannot read: disk gone (retrying)')]
    assert err.text == 'disk gone'
    # Another reason while it lasts: logged (the operator sees the change).
    assert err.fail('permission denied')
    assert _lines(caplog) == [('ERROR', 'permission denied')]
    assert err.recover('works again') is True
    assert err.recover('works again') is False
    assert _lines(caplog) == [('INFO', 'works again')]
    assert err.text is None
    # The same failure after a recovery is a new one.
    assert err.fail('disk gone')
    assert _lines(caplog) == [('ERROR', 'disk gone')]


def test_level_and_silent_recovery(caplog) -> None:
    caplog.set_level(logging.INFO)
    err = LastingError(LOG, logging.WARNING)
    err.fail('x', 'no counter: %s', 'x')
    assert err.recover() is True
    err.fail('x', 'no counter: %s', 'x')
    assert _lines(caplog) == [('WARNING', 'no counter: x'),
                              ('WARNING', 'no counter: x')]


def test_exc_info_is_logged(caplog) -> None:
    caplog.set_level(logging.INFO)
    err = LastingError(LOG)
    try:
        raise ValueError('bug')
    except ValueError:
        err.fail('internal error: bug', 'unexpected error', exc_info=True)
    (record,) = [r for r in caplog.records if r.name == LOG.name]
    assert record.exc_info is not None and record.getMessage() == \
        'unexpected error'
