"""SLURM's durations and sizes, read and written in one place (squeue's %L, sacct, sbatch --time)."""
import pytest

from airetrain.cluster.units import duration_s, format_duration, size_mb


@pytest.mark.parametrize("text,seconds", [
    ("1-02:03:04", 93784), ("02:03:04", 7384), ("03:04", 184),      # squeue %L: [D-]HH:MM:SS, MM:SS
    ("00:44.048", 44.048), ("12:00:00.5", 43200.5), (" 05:00 ", 300),  # sacct keeps milliseconds
])
def test_durations(text, seconds):
    assert duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["UNLIMITED", "NOT_SET", "INVALID", "Partition_Limit", "", None, "5", "1:2:3:4"])
def test_what_is_no_duration_is_none(text):
    assert duration_s(text) is None


@pytest.mark.parametrize("seconds,text", [(90 * 60, "01:30:00"), (59.2, "00:01:00"), (25 * 3600 + 1, "1-01:00:01"),
                                          (48 * 3600, "2-00:00:00")])
def test_sbatch_durations_round_trip(seconds, text):
    assert format_duration(seconds) == text and duration_s(text) >= seconds


@pytest.mark.parametrize("text,mb", [("411280K", 401.64), ("1.5G", 1536), ("4000Mn", 4000), ("2000Mc", 2000),
                                     ("7", 7), ("", 0), (None, 0), ("lots", 0)])
def test_sizes(text, mb):
    assert size_mb(text) == pytest.approx(mb, abs=0.01)
