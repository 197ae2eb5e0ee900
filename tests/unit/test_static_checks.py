"""The static checks `make test` runs can fail: mypy and `ruff format --check` are each run, with the project's
pyproject.toml, on a planted violation (exit 1, the problem named) and on the same file fixed (exit 0); the module
length limit is checked on the tree and on a planted long module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # cwd = the repository root, as `make test` runs them
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _mypy(target: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return _run("mypy", "--config-file", str(PYPROJECT), "--cache-dir", str(cache), str(target))


def _package(root: Path, source: str) -> Path:
    package = root / "planted"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "values.py").write_text(source)
    return package


def test_mypy_reports_a_planted_type_error(tmp_path: Path) -> None:
    package = _package(tmp_path, 'count: int = "a"\n')
    bad = _mypy(package, tmp_path / "cache")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "values.py:1: error" in bad.stdout and "[assignment]" in bad.stdout, bad.stdout

    _package(tmp_path, "count: int = 1\n")
    good = _mypy(package, tmp_path / "cache")
    assert good.returncode == 0, good.stdout + good.stderr


def test_mypy_reads_the_project_config(tmp_path: Path) -> None:
    """An unneeded `# type: ignore` is an error only with pyproject.toml's warn_unused_ignores: the run above
    used the project's settings, not mypy's defaults."""
    package = _package(tmp_path, "count: int = 1  # type: ignore[assignment]\n")
    out = _mypy(package, tmp_path / "cache")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[unused-ignore]" in out.stdout, out.stdout


def test_ruff_format_check_rejects_a_misformatted_file(tmp_path: Path) -> None:
    target = tmp_path / "shape.py"
    target.write_text("def area( w,h ):\n  return w*h\n")
    bad = _run("ruff", "format", "--check", "--config", str(PYPROJECT), str(target))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "shape.py" in bad.stdout, bad.stdout

    target.write_text("def area(w, h):\n    return w * h\n")
    good = _run("ruff", "format", "--check", "--config", str(PYPROJECT), str(target))
    assert good.returncode == 0, good.stdout + good.stderr


MAX_MODULE_LINES = 600  # a module a reader takes in at one sitting; past this it does more than one thing


def _long_modules(roots: list[Path], limit: int) -> list[str]:
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {n} lines"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > limit
    ]


def test_no_module_is_over_600_lines() -> None:
    long = _long_modules([ROOT / "cosmos_train", ROOT / "flows", ROOT / "tasks"], MAX_MODULE_LINES)
    assert not long, "split these modules by what they do:\n" + "\n".join(long)


def test_the_length_check_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert _long_modules([tmp_path], MAX_MODULE_LINES) == [f"{tmp_path / 'long.py'}: 601 lines"]


GRPO_TRAINER_MAX_LINES = 350  # grpo.py: wiring and the step; update, prompts, validation beside it
README_MAX_LINES = 250  # what it is, the two commands, what it does, a pointer per topic; the rest is docs/


def test_the_grpo_trainer_is_wiring_and_the_step() -> None:
    n = len((ROOT / "cosmos_train" / "train" / "grpo.py").read_text().splitlines())
    assert n <= GRPO_TRAINER_MAX_LINES, f"cosmos_train/train/grpo.py: {n} lines; move the rest beside it"


def test_the_readme_is_a_first_screen_and_pointers() -> None:
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md: {n} lines; move sections to docs/ and point at them"
