"""train/deadline.py: every rank stops together, at the deadline or on SIGTERM (rank 0 of 1 here)."""
import os
import signal
import time

import pytest
import torch

from airetrain.train.deadline import Stopper

CPU = torch.device("cpu")


@pytest.fixture
def sigterm_restored():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


def test_goes_on_until_the_margin_before_the_deadline(process_group, sigterm_restored):
    far = Stopper(True, margin_s=60, env={"AIRETRAIN_END_TIME": str(time.time() + 600)})
    assert far.check(CPU) is None
    near = Stopper(True, margin_s=60, env={"AIRETRAIN_END_TIME": str(time.time() + 30)})
    assert near.check(CPU) == "deadline"


def test_sigterm_stops_after_the_step_in_progress(process_group, sigterm_restored):
    stopper = Stopper(True, margin_s=60, env={})
    assert stopper.check(CPU) is None
    os.kill(os.getpid(), signal.SIGTERM)   # the real signal: the handler only sets a flag
    assert stopper.check(CPU) == "signal"


def test_no_deadline_outside_slurm_without_an_end_time(process_group, sigterm_restored):
    stopper = Stopper(True, margin_s=10 ** 9, env={})
    assert stopper.end_time is None and stopper.check(CPU) is None


def test_poll_agrees_a_step_later_without_waiting_on_this_step(process_group, sigterm_restored):
    stopper = Stopper(True, margin_s=60, env={})
    assert stopper.poll() is None   # sends "go on"
    os.kill(os.getpid(), signal.SIGTERM)
    assert stopper.poll() is None   # reads the earlier "go on", sends "signal"
    assert stopper.poll() == "signal" and stopper._pending is None   # agreed: nothing more in flight
    near = Stopper(True, margin_s=60, env={"AIRETRAIN_END_TIME": str(time.time() + 30)})
    assert [near.poll(), near.poll()] == [None, "deadline"]
    far = Stopper(True, margin_s=60, env={"AIRETRAIN_END_TIME": str(time.time() + 600)})
    assert [far.poll() for _ in range(5)] == [None] * 5 and far._pending is not None
    far.close()
    assert far._pending is None


def test_a_scripts_agreement_is_a_collective_every_few_calls_and_acts_on_a_signal_within_them(process_group,
                                                                                               sigterm_restored):
    from airetrain.train.deadline import Agreement

    stopper = Stopper(True, margin_s=60, env={})
    agreement = Agreement(stopper, CPU, budget_s=10 ** 9, most=8)   # any pace fits: doubles, up to most
    agreed_every = []
    for _ in range(40):
        assert not agreement.stop()
        if agreement.left == agreement.every:   # this call agreed
            agreed_every.append(agreement.every)
    assert agreed_every[:5] == [1, 2, 4, 8, 8]
    os.kill(os.getpid(), signal.SIGTERM)
    calls = 1
    while not agreement.stop():
        calls += 1
    assert calls <= 8 and agreement.reason == "signal" and agreement.stop()   # and it stays stopped


def test_an_agreement_whose_budget_fits_no_second_call_checks_every_call(process_group, sigterm_restored):
    from airetrain.train.deadline import Agreement

    agreement = Agreement(Stopper(True, margin_s=0, env={}), CPU)   # no margin: no budget
    for _ in range(5):
        agreement.stop()
        assert agreement.every == 1
