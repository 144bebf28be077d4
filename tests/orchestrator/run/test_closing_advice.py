"""A table's closing advice: a failure that would repeat (a member that cannot be set up, a step
that raises, a NaN at a fixed seed) says to fix it first; only other failures say --resume."""

from orchestrator.run.campaign import closing_advice


def test_a_deterministic_failure_says_fix_it_not_resume():
    line = closing_advice(["could not be set up: ValueError: teacher names must be unique",
                           "failed at step 1 in method 'misfit' (text batch of 8): RuntimeError"])
    assert "fix the setting or the method first" in line and "--resume alone would fail" in line


def test_a_worker_that_died_says_resume():
    line = closing_advice(["ActorDiedError: the worker died"])
    assert line == "some runs failed; run the same command with --resume to run only those"
    mixed = closing_advice(["ActorDiedError", "non-finite loss at step 3: term 'total' is nan"])
    assert "1 for a reason in their settings or method" in mixed and "--resume" in mixed
