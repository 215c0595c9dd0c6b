"""report/render.py and report/plots.py: efficiency.csv, .md and the HTML page with its plots, in human
units, checked in a real headless Chromium."""
import base64
import re

import pandas as pd

from airetrain.report.collection import jobs_table
from airetrain.report.render import to_markdown, write_efficiency

from sacct_captured import CAPTURED, IDS


def test_report_files_csv_markdown_and_html_with_its_plots(tmp_path):
    df = jobs_table(list(IDS.values()), text=CAPTURED)
    paths = write_efficiency(df, tmp_path)
    assert set(paths) >= {"csv", "md", "html", "efficiency_png", "throughput_png", "loss_png"}
    page = paths["html"].read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3
    for data in images:
        raw = base64.b64decode(data)
        assert raw.startswith(b"\x89PNG") and len(raw) > 5000   # real images, not placeholders
    assert "OUT_OF_MEMORY" in page and "ran out of memory" in page
    md = to_markdown(df)
    assert "| run |" in md and "Advice:" in md and "`time_eff`" in md
    assert paths["csv"].read_text().splitlines()[0].startswith("run,state,job_id,job_state")


def test_the_page_shows_percentages_human_units_and_colours_as_reportseff_does():
    from airetrain.report.render import cell_class, cell_text

    assert cell_text("cpu_eff", 0.3479) == "34.8 %" and cell_text("mem_used_mb", 2.458e5) == "240.04 GB"
    assert cell_text("mem_used_mb", 411.6) == "412 MB" and cell_text("elapsed_s", 3725) == "01:02:05"
    assert cell_text("samples_per_s", 12345.6) == "12,346" and cell_text("cpus", 24.0) == "24"
    assert cell_text("eval_loss", 0.123456) == "0.1235" and cell_text("gpu_util", float("nan")) == ""
    assert [cell_class("cpu_eff", v) for v in (0.9, 0.5, 0.1)] == ["good", "fair", "poor"]
    assert [cell_class("time_eff", v) for v in (0.95, 0.5, 0.1)] == ["poor", "good", "fair"]
    assert cell_class("data_wait_frac", 0.4) == "poor" and cell_class("run", 0.1) == ""


def test_cpu_and_gpu_runs_are_plotted_apart():
    from airetrain.report.plots import throughput_plot

    df = pd.DataFrame({"run": ["cpu2", "g3", "g6"], "world_size": [2, 3, 6], "samples_per_s": [100.0, 900.0, 1700.0],
                       "device": ["cpu", "cuda", "cuda"]})
    axes = throughput_plot(df).axes
    assert [a.get_xlabel() for a in axes] == ["GPUs", "CPU processes"]
    assert [len(a.collections[0].get_offsets()) for a in axes] == [2, 1]   # g3, g6 | cpu2
    (only_cpu,) = throughput_plot(df[df["device"] == "cpu"]).axes
    assert only_cpu.get_xlabel() == "CPU processes"


def test_ten_slurm_jobs_page_fits_1280_px_in_chromium(tmp_path):
    from browser import measure, screenshot

    df = jobs_table(list(IDS.values()), text=CAPTURED)
    page = write_efficiency(df, tmp_path)["html"]
    seen = measure(page, tmp_path)
    assert seen["rows"] == len(df) == 10 and seen["table_right"] <= 1280 and seen["page_width"] <= 1280, seen
    assert seen["images"] == seen["loaded"] == 3
    assert screenshot(page, tmp_path / "page.png").stat().st_size > 50_000
