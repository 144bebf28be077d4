"""ui_check's chart check takes a setting's axis label whole or cut (issue 49): MLflow's
parallel-coordinates chart cuts a label over 15 characters only where it lacks room, and a
table of one setting axis draws it whole."""

from orchestrator.results.browser_check import missing_axes


def test_a_whole_label_counts_as_the_axis():
    text = "Parallel Coordinates\nobjective.lam_plus\ntest/avg"
    assert missing_axes(text, ["objective.lam_plus"]) == []


def test_a_cut_label_counts_and_a_missing_one_is_named():
    text = "Parallel Coordinates\nobject...margin\ntest/avg"
    assert missing_axes(text, ["objective.adaptive_margin", "objective.lam_plus"]) == \
        ["objective.lam_plus"]
