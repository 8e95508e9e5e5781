"""packaging/linux/sysdeps.sh is CI's first step: it must say what it finds, on a clone with no venv.

It once died silently with exit 2 there: `ls` of the venv's Qt plugin found nothing, and
`set -o pipefail` turned that into the script's exit status before it printed a word."""
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "packaging" / "linux" / "sysdeps.sh"


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian/Ubuntu system")
def test_check_on_a_tree_without_a_venv_answers(tmp_path):
    # The same layout as a fresh clone: packaging/linux/sysdeps.sh, no .venv beside it.
    copy = tmp_path / "packaging" / "linux" / "sysdeps.sh"
    copy.parent.mkdir(parents=True)
    shutil.copy(SCRIPT, copy)
    done = subprocess.run(["bash", str(copy), "--check"], capture_output=True, text=True, timeout=60)
    # 0: everything present; 1: it names what is missing. Anything else is the script failing.
    assert done.returncode in (0, 1), (done.returncode, done.stdout, done.stderr)
    said = done.stdout + done.stderr
    assert ("all system packages present" in said) if done.returncode == 0 else ("missing:" in said)


def test_an_unknown_group_is_named():
    done = subprocess.run(["bash", str(SCRIPT), "--check", "nonsense"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "unknown group nonsense" in done.stderr
