from helpers import run_python


def test_the_demo_runs_and_prints_slipstream_throughput():
    result = run_python("from slipstream._cli import main; main(['demo', '--samples', '2000'])", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "slipstream.DataLoader" in result.stdout and "samples/s" in result.stdout
