"""Math answer rewards under cosmos-rl's names, for its text recipes (GSM8K, MATH, DAPO-Math): cosmos-rl 0.4.7's
rules (`cosmos_rl/dispatcher/algo/reward.py`), written here and checked against its own functions
(tests/unit/test_cosmos_rl_rewards.py).

    gsm8k_reward(completion, reference)          # 1.0 when the first "#### N" numbers of both agree, else 0.0
    boxed_math_reward(completion, reference)     # 1.0 when math_verify finds the completion's answer equal
    direct_math_reward(completion, reference)    # 1.0 / -1.0 on the last "Answer: ..." line

boxed_math is math_verify's comparison as cosmos-rl builds it: the reference is read as LaTeX only (a reference
with no $...$, \\(...\\) or \\boxed{...} gives math_verify nothing to compare with, so it scores 0), the
completion as a plain expression or LaTeX, and the two compared symbolically (0.5 = \\frac{1}{2}, \\sqrt{2}/2 =
\\frac{\\sqrt2}{2}); a timeout or any failure scores 0. math_verify's timeouts are SIGALRM alarms, which only the
main thread may set: elsewhere (the reward service's worker threads, a Prefect task's thread) math_verify refuses
to run, and cosmos-rl's function, catching that, scores every completion 0. Off the main thread the comparison runs
here in a child process of its own (`_OffThreadComparer`), in its main thread, with the same timeouts, and a
deadline over the whole comparison that kills a child stuck where an alarm cannot reach.
"""

from __future__ import annotations

import json
import logging
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

# cosmos-rl's normalize_final_answer tables (from Minerva's MATH normalisation), verbatim
SUBSTITUTIONS = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
]
REMOVED_EXPRESSIONS = [
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    r"\mathrm{th}",
    r"^\circ",
    r"^{\circ}",
    r"\;",
    r",\!",
    "{,}",
    '"',
    "\\dots",
]
_GSM8K = re.compile(r"#### (-?[0-9.,]+)")  # GSM8K's final line; [0-9], not \d: no other script's digits
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
# cosmos-rl's comparer (`_comparer`), built at the first comparison
_COMPARE: Callable[[list[str], list[str]], Any] | None = None
# math_verify's own timeouts (5 s for each of the two parses, 2 s to print, 5 s for each of up to 4 comparisons)
# stop a comparison within 32 s; a child still busy after this is stuck where no alarm reaches (C code) and is killed
COMPARE_DEADLINE_S = 40.0
CHILD_START_S = 120.0  # importing sympy and math_verify in a fresh interpreter, on a machine busy with training


def normalize_final_answer(final_answer: str) -> str:
    """cosmos-rl's normalisation of a final answer (units, spacing, \\text, \\boxed and $ stripped)."""
    final_answer = final_answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer.strip()


def _gsm8k_number(text: str) -> str | None:
    """The number after the first "#### " (commas dropped), None without one."""
    found = _GSM8K.search(text)
    return found.group(1).replace(",", "") if found else None


def gsm8k_reward(completion: str, reference: str) -> float:
    """cosmos-rl's gsm8k rule: 1.0 when the numbers after the first "#### " of the completion and of the reference
    agree, else 0.0."""
    # cosmos-rl's behaviour, kept on purpose: a completion and a reference that both lack "#### " compare None with
    # None and score 1.0 (so a reference without "#### " rewards every completion without one)
    return 1.0 if _gsm8k_number(completion) == _gsm8k_number(reference) else 0.0


def direct_math_reward(completion: str, reference: str) -> float:
    """cosmos-rl's direct_math rule: 1.0 when the last "Answer: ..." line equals the reference after
    `normalize_final_answer`, else -1.0."""
    found = _ANSWER_LINE.findall(completion)
    answer = found[-1] if found else "[INVALID]"
    return 1.0 if normalize_final_answer(answer) == normalize_final_answer(reference) else -1.0


def _comparer() -> Callable[[list[str], list[str]], Any]:
    """cosmos-rl's comparer: the reference (gold) read as LaTeX, the completion as a plain expression or LaTeX."""
    global _COMPARE
    if _COMPARE is None:
        # math_verify and sympy under it take seconds to import: only a process that scores boxed_math pays for
        # them (every GRPO rank and CLI call imports this module), and a kit that never scores it need not carry them
        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

        _COMPARE = math_metric(
            gold_extraction_target=(LatexExtractionConfig(),),
            pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
        )
    return _COMPARE


def _verified(completion: str, reference: str) -> float:
    """math_verify's score of the completion against the reference, in this thread (the main one: its alarms)."""
    compare = _comparer()
    from math_verify.errors import TimeoutException  # loaded by _comparer's imports: no cost here

    try:
        score, _ = compare([reference], [completion])
        return float(score)
    except TimeoutException:  # a BaseException: math_verify's alarm went off outside its own handlers
        logger.warning("boxed_math: math_verify timed out comparing a completion with %r; scored 0", reference[:200])
        return 0.0
    except Exception:  # a reference without LaTeX ("no gold targets found"), a parse failure: cosmos-rl scores 0
        return 0.0


def _serve_comparisons() -> None:
    """The child process of `_OffThreadComparer`: one JSON [completion, reference] per stdin line, its score per
    stdout line, until stdin closes (the parent is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes our stdin
    logging.basicConfig(level=logging.ERROR)  # math_verify warns on every answer it cannot read: the parent's logs
    print("ready", flush=True)
    for line in sys.stdin:
        completion, reference = json.loads(line)
        print(json.dumps(_verified(completion, reference)), flush=True)


# The child loads this file under its own name: importing it as cosmos_train.rewards.math would import the whole
# package (seconds), and running it as a script would put its folder first on sys.path, where this math.py hides
# the standard library's math.
_CHILD_MAIN = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('cosmos_train_boxed_math_child', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module._serve_comparisons()\n"
)


class _OffThreadComparer:
    """math_verify in a child process, for callers off the main thread; one comparison at a time (a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None

    def score(self, completion: str, reference: str) -> float:
        with self._lock:
            line = self._ask(json.dumps([completion, reference]) + "\n")
            if line is None:
                logger.warning(
                    "boxed_math: math_verify took over %.0f s comparing a completion with %r (or its process "
                    "ended); scored 0, process restarted",
                    COMPARE_DEADLINE_S,
                    reference[:200],
                )
                self.close()
                return 0.0
            return float(json.loads(line))

    def _ask(self, request: str) -> str | None:
        child = self._running()
        try:
            _send(child, request)
        except OSError:  # it ended since the last comparison (killed from outside): once more, with a new one
            child = self._restart()
            _send(child, request)
        assert child.stdout is not None
        return _read_line(child.stdout, COMPARE_DEADLINE_S)

    def _running(self) -> subprocess.Popen[str]:
        if self._child is None or self._child.poll() is not None:
            return self._restart()
        return self._child

    def _restart(self) -> subprocess.Popen[str]:
        self.close()
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD_MAIN, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        if _read_line(child.stdout, CHILD_START_S) != "ready":
            child.kill()
            child.wait()
            raise RuntimeError(
                f"boxed_math: math_verify's comparison process ({sys.executable}) did not start within "
                f"{CHILD_START_S:.0f} s (its error, if any, is on stderr above); boxed_math needs it off the main "
                "thread"
            )
        self._child = child
        return child

    def close(self) -> None:
        """Stop the child (a later comparison starts a new one)."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()


def _send(child: subprocess.Popen[str], request: str) -> None:
    assert child.stdin is not None
    child.stdin.write(request)
    child.stdin.flush()


def _read_line(pipe: IO[str], timeout_s: float) -> str | None:
    """One line from the child, stripped; None past `timeout_s` or at its end. Lines come one per request, so
    nothing waits in the pipe's buffer unseen by select."""
    ready, _, _ = select.select([pipe], [], [], timeout_s)
    line = pipe.readline() if ready else ""
    return line.strip() if line else None


_OFF_THREAD = _OffThreadComparer()


def boxed_math_reward(completion: str, reference: str) -> float:
    """cosmos-rl's boxed_math: math_verify's score (1.0 or 0.0) of the completion against the reference (module
    docstring), in this thread when it is the main one, else in the comparison process."""
    if threading.current_thread() is threading.main_thread():
        return _verified(completion, reference)
    return _OFF_THREAD.score(completion, reference)
