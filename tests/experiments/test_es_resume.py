"""``rlfast resume`` of an evolution-strategies run: exact continuation from any snapshot,
the budget checks, refused changes, and a longer --steps budget."""
import csv
import json

from rlfast.cli import main

SAME = ["Diagnostics/Iteration", "Diagnostics/CumSteps", "Diagnostics/CumEvaluations",
        "ReturnAverage", "PopulationReturnAverage", "PopulationReturnMax", "BestReturn", "Sigma"]


def _rows(run):
    with open(run / "progress.csv") as f:
        return [{k: r[k] for k in SAME} for r in csv.DictReader(f)]


def test_resume_from_an_older_snapshot_replays_the_same_generations(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "cmaes", "Pendulum-v1", "--log-dir", str(run), "--no-progress",
                 "--snapshot-mode", "all", "--set", "runner.n_generations=6",
                 "--set", "strategy.popsize=8"]) == 0
    original = _rows(run)
    assert len(original) == 6
    assert main(["resume", str(run), "--snapshot", str(run / "itr_2.pkl"), "--no-progress"]) == 0
    assert _rows(run) == original  # rows 3-5 were dropped and played again, identically
    params = json.loads((run / "params.json").read_text())
    assert [(r["from_itr"], r["snapshot"]) for r in params["resumes"]] == [(2, "itr_2.pkl")]
    capsys.readouterr()
    # The newest snapshot already covers the whole budget.
    assert main(["resume", str(run), "--no-progress"]) == 2
    assert "whole budget" in capsys.readouterr().err
    # Changes need --force.
    assert main(["resume", str(run), "--snapshot", str(run / "itr_2.pkl"),
                 "--set", "evaluator.eval_episodes=2"]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["resume", str(run), "--n-envs", "4"]) == 2
    assert "--n-envs does not apply" in capsys.readouterr().err


def test_resume_with_a_larger_step_budget_searches_on(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "cem", "CartPole-v1", "--log-dir", str(run), "--no-progress",
                 "--set", "runner.n_generations=2", "--set", "strategy.popsize=8"]) == 0
    done = int(_rows(run)[-1]["Diagnostics/CumSteps"])
    assert main(["resume", str(run), "--steps", str(done + 500), "--no-progress"]) == 0
    rows = _rows(run)
    assert int(rows[-1]["Diagnostics/CumSteps"]) >= done + 500
    assert [int(r["Diagnostics/Iteration"]) for r in rows] == list(range(len(rows)))
