"""An experiment through the pipeline: 2 settings x 3 seeds, and the results table the report rule
writes beside the efficiency table, checked against figures computed here from the six train.json
files; its page in a real headless Chromium; `airetrain compare` names the one differing key."""
import csv
import json
import statistics

import pytest

from conftest import BIN, read_json, run, snakemake, write_config

pytestmark = pytest.mark.e2e
T_975_2 = 4.302652729911275   # Student's t, 97.5 % quantile, 2 degrees of freedom
EXPERIMENT = {"defaults": {"processes": 1, "precision": "fp32", "seeds": [0, 1, 2],
                           "batch": {"global": 64, "per_device": 64}, "train": {"epochs": 1, "log_every_steps": 10}},
              "sweep": {"optim.lr": ["3e-3", "3e-4"]}, "runs": {"cnn": {}}}


def test_two_settings_by_three_seeds_give_a_results_table_with_their_means_and_intervals(tmp_path):
    from browser import measure

    cfg = write_config(tmp_path / "c.yaml", {"roots": {"scratch": str(tmp_path / "scratch")}, **EXPERIMENT})
    snakemake(tmp_path, cfg, "--cores", "2")
    report = tmp_path / "results/report"
    groups = {row["group"]: row for row in csv.DictReader(open(report / "results.csv"))}
    assert sorted(groups) == ["cnn-lr3e-3", "cnn-lr3e-4"]
    for group, row in groups.items():
        trained = [read_json(tmp_path / f"results/{group}-seed{s}/train.json") for s in range(3)]
        assert [t["seed"] for t in trained] == [0, 1, 2]   # each run trained with its own seed
        losses = [t["eval_loss"] for t in trained]
        assert len(set(losses)) == 3   # and the seeds mattered: three different results, not one thrice
        sd = statistics.stdev(losses)
        assert (row["n_finished"], row["n_planned"]) == ("3", "3")
        assert float(row["eval_loss"]) == pytest.approx(statistics.mean(losses))
        assert float(row["eval_loss_sd"]) == pytest.approx(sd)
        assert float(row["eval_loss_ci95"]) == pytest.approx(T_975_2 * sd / 3 ** 0.5)
        assert row["differs"] == f"optim.lr={0.003 if group.endswith('3e-3') else 0.0003}"
    assert (report / "results-eval_loss.png").stat().st_size > 5000
    assert "± " in (report / "results.md").read_text()
    seen = measure(report / "results.html", tmp_path)
    assert seen["rows"] == 2 and seen["images"] == seen["loaded"] >= 2 and seen["page_width"] <= 1280, seen
    page, efficiency = (report / "results.html").read_text(), (report / "efficiency.html").read_text()
    assert '<a href="#group-cnn-lr3e-3">' in page and 'id="group-cnn-lr3e-3"' in page
    for seed in range(3):   # each run links to its row of the efficiency page, which is there
        run_name = f"cnn-lr3e-4-seed{seed}"
        assert f'href="efficiency.html#run-{run_name}"' in page and f'id="run-{run_name}"' in efficiency

    assert sorted_first_rows(report / "results.html", tmp_path) == ["cnn-lr3e-3", "cnn-lr3e-4"]

    found = json.loads(run([str(BIN / "airetrain"), "compare", "--results", str(tmp_path / "results"), "--json",
                            "cnn-lr3e-3", "cnn-lr3e-4"]).stdout)
    assert list(found["differs"]) == ["optim.lr"]


CLICK_EVAL_LOSS = """<script>window.addEventListener("load", () => {
  const t = document.querySelector("table.key");
  const th = [...t.tHead.rows[0].cells].find(c => c.textContent === "eval_loss");
  const first = () => t.tBodies[0].rows[0].cells[0].textContent, seen = [];
  th.click(); seen.push(first()); th.click(); seen.push(first());
  document.body.setAttribute("data-sorted", JSON.stringify(seen));
});</script>"""


def sorted_first_rows(page, tmp) -> list[str]:
    """In headless Chromium: the group table's first row after a click on eval_loss (ascending: the
    lowest loss first), then after a second click (descending)."""
    import re
    import subprocess

    from browser import FLAGS, need_chromium

    probe = tmp / "sorted.html"
    probe.write_text(page.read_text().replace("</body>", CLICK_EVAL_LOSS + "</body>"))
    dom = subprocess.run([need_chromium(), *FLAGS, "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(re.search(r'data-sorted="([^"]*)"', dom).group(1).replace("&quot;", '"'))
