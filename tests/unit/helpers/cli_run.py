"""Running ``metal3-ipam`` in-process as a user would: the exit code and what it printed; the samples it is run on."""

from __future__ import annotations

from pathlib import Path

from metal3_ipam.cli import main


ROOT = Path(__file__).resolve().parents[3]


SAMPLES = ROOT / "samples"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse usage errors
        code = exit_.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err
