"""The README's example command runs (CI runs it so it cannot rot)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart_example_runs():
    env = dict(os.environ, PYTHONPATH=ROOT)     # this checkout, not an installed copy
    result = subprocess.run([sys.executable, "examples/quickstart.py"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "max abs difference vs jax.jit: 0" in result.stdout
    assert "fell back" in result.stdout and "no" in result.stdout
