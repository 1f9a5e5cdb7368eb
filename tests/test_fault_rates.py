"""The two page-fault rates the cost model prices with (`fault_rates.py`): each measured once
and cached, the calibration's own process, and its fall-backs. No test asserts a measured
speed."""
import sys
import time

import jax
import pytest

from hlo_opt import deadline
from hlo_opt.cost import fault_rates, memory


def _refused():
    raise AssertionError("a rate was measured again where the cache holds it")


def test_the_threads_fresh_page_rate_is_measured_once_and_cached(tmp_path, monkeypatch):
    header = {"device": "test", "platform": "cpu", "jax": jax.__version__}
    rate = fault_rates.fresh_rate(header, tmp_path)
    assert 0 < rate < 1e-6
    monkeypatch.setattr(fault_rates, "_threads_rate", _refused)
    assert fault_rates.fresh_rate(header, tmp_path) == rate


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_the_threads_share_the_fresh_pages_each_page_once(threads):
    nbytes = 10 * memory.PAGE + 5                   # the last, partial page is not written
    written = [i for part in fault_rates.shares(nbytes, threads)
               for i in range(nbytes)[part]]
    assert sorted(written) == [p * memory.PAGE for p in range(10)]
    assert len(fault_rates.shares(nbytes, threads)) == threads


def test_a_fresh_page_that_costs_nothing_measurable_is_priced_at_the_vms_rate(
        tmp_path, monkeypatch, caplog):
    header = {"device": "test", "platform": "cpu", "jax": jax.__version__}
    monkeypatch.setattr(fault_rates, "_threads_rate", lambda: -1e-12)
    with caplog.at_level("WARNING", logger="hlo_opt"):
        assert fault_rates.fresh_rate(header, tmp_path) == fault_rates.DEFAULT_FRESH
    assert "nothing measurable" in caplog.text


def test_the_fault_rate_is_measured_once_and_cached(tmp_path):
    header = {"device": "test", "platform": "cpu", "jax": jax.__version__}
    rate = fault_rates.calibrate(header, tmp_path)
    assert 0 < rate < 1e-6                  # seconds per byte: under 4 ms a page
    assert fault_rates.calibrate(header, tmp_path) == rate


def test_a_temp_buffer_past_the_line_faults_every_page_each_call():
    if fault_rates.taken() is None:
        pytest.skip("this OS counts no page faults")
    fn, args = fault_rates.copies_program(fault_rates.BIG_COPIES)
    jax.block_until_ready(fn(*args))
    before = fault_rates.taken()
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    pages = fault_rates.BIG_COPIES * fault_rates.COPY_BYTES // memory.PAGE
    assert (fault_rates.taken() - before) / 3 >= 0.95 * pages


def test_the_fault_rate_divides_by_the_pages_the_two_programs_faulted():
    copy_pages = fault_rates.COPY_BYTES / memory.PAGE
    # the program under the line faulted half its pages in its least sample
    assert fault_rates._rate([(2e-3, copy_pages / 2), (3e-3, copy_pages)]) == pytest.approx(
        1e-3 / (copy_pages / 2 * memory.PAGE))
    # both faulted alike, or the one past the line ran no slower: not the faults'
    assert fault_rates._rate([(2e-3, copy_pages), (2.1e-3, copy_pages)]) is None
    assert fault_rates._rate([(2e-3, 0.0), (1.9e-3, copy_pages)]) is None


def _places(monkeypatch, apart, here):
    """Stands in for the calibration's rounds, in its own process and in this one."""
    def fake(result):
        def copy_seconds(counts):
            assert counts == (fault_rates.SMALL_COPIES, fault_rates.BIG_COPIES)
            if isinstance(result, Exception):
                raise result
            return result
        return copy_seconds
    monkeypatch.setattr(fault_rates, "_copy_seconds_apart", fake(apart))
    monkeypatch.setattr(fault_rates, "_copy_seconds", fake(here))


def test_the_fault_rate_is_measured_here_where_its_own_process_cannot_tell(monkeypatch, caplog):
    copy_pages = fault_rates.COPY_BYTES / memory.PAGE
    apart = [(2e-3, 0.0), (3e-3, copy_pages)]
    alike = [(3e-3, copy_pages), (3e-3, copy_pages)]
    _places(monkeypatch, apart, AssertionError("measured here too"))
    assert fault_rates._measured_rate() == fault_rates._rate(apart)
    _places(monkeypatch, alike, apart)
    assert fault_rates._measured_rate() == fault_rates._rate(apart)
    _places(monkeypatch, fault_rates.ChildFailed("did not start"), apart)
    assert fault_rates._measured_rate() == fault_rates._rate(apart)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    # neither tells the faults apart: the VM's rate, and the user is told
    _places(monkeypatch, alike, alike)
    with caplog.at_level("WARNING", logger="hlo_opt"):
        assert fault_rates._measured_rate() == fault_rates.DEFAULT_FAULT
    assert "could not be measured" in caplog.text


def test_the_calibrations_process_fails_cleanly_and_stops_at_a_searchs_limit(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(sys, "executable", "/nonexistent/python")
        with pytest.raises(fault_rates.ChildFailed, match="did not start"):
            fault_rates._copy_seconds_apart((1, 2))
        m.setattr(sys, "executable", "/usr/bin/uwsgi")     # an embedded interpreter
        with pytest.raises(fault_rates.ChildFailed, match="not one to start again"):
            fault_rates._copy_seconds_apart((1, 2))
    start = time.monotonic()
    with deadline.stop_when(lambda: time.monotonic() > start + 1.0):
        with pytest.raises(deadline.OutOfTime):
            fault_rates._copy_seconds_apart((fault_rates.SMALL_COPIES, fault_rates.BIG_COPIES))
    assert time.monotonic() - start < 3.0       # the child is not waited for
