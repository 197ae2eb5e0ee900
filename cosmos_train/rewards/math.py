"""Math answer rewards under cosmos-rl's names, for its text recipes (GSM8K, MATH, DAPO-Math).

    gsm8k_reward(completion, reference)          # 1.0 when the "#### N" numbers agree (both sides), else 0.0
    boxed_math_reward(completion, reference)     # 1.0 when the last \\boxed{...} (else the last number) equals it
    direct_math_reward(completion, reference)    # 1.0 / -1.0 on the last "Answer: ..." line, as cosmos-rl

gsm8k and direct_math are cosmos-rl's rules (`cosmos_rl/dispatcher/algo/reward.py`, the strict "#### " parse and
`normalize_final_answer`) written out here. boxed_math: cosmos-rl scores it with math_verify's symbolic comparer,
which is not installed here; this reads the completion's last \\boxed{...} content (else its last number) and the
reference's own \\boxed{...} (else the whole reference), normalises both like direct_math and counts them equal
when the strings agree or both are the same number (so "0.50" = "1/2" = "\\frac{1}{2}", "1,000" = "1000"). Forms
math_verify would also equate (a different but equal expression, sets, intervals) score 0 here.
"""

from __future__ import annotations

import re
from fractions import Fraction

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
_GSM8K = re.compile(r"#### (\-?[0-9\.\,]+)")
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")


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


def gsm8k_reward(completion: str, reference: str) -> float:
    """cosmos-rl's gsm8k rule: the numbers after "#### " in the completion and the reference agree (a
    completion without one scores 0, as does a reference without one)."""

    def strict(text: str) -> str | None:
        found = _GSM8K.search(text)
        return found.group(0).split("#### ")[1].replace(",", "").replace("$", "") if found else None

    mine = strict(completion)
    return 1.0 if mine is not None and mine == strict(reference) else 0.0


def direct_math_reward(completion: str, reference: str) -> float:
    """cosmos-rl's direct_math rule: 1.0 when the last "Answer: ..." line equals the reference after
    `normalize_final_answer`, else -1.0."""
    found = _ANSWER_LINE.findall(completion)
    answer = found[-1] if found else "[INVALID]"
    return 1.0 if normalize_final_answer(answer) == normalize_final_answer(reference) else -1.0


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces balanced; None without one."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def _as_number(text: str) -> Fraction | None:
    text = text.replace(",", "").strip()
    frac = _FRAC.match(text)
    try:
        if frac:
            sign = -1 if frac.group(1) else 1
            return sign * Fraction(int(frac.group(2)), int(frac.group(3)))
        return Fraction(text)  # integers, decimals, "a/b"
    except (ValueError, ZeroDivisionError):
        return None


def boxed_math_reward(completion: str, reference: str) -> float:
    """1.0 when the completion's final answer (its last \\boxed{...}, else its last number) equals the
    reference's (its \\boxed{...}, else the whole reference), as normalised strings or as numbers."""
    answer = last_boxed(completion)
    if answer is None:
        numbers = _NUMBER.findall(completion)
        if not numbers:
            return 0.0
        answer = numbers[-1]
    gold = last_boxed(reference)
    gold = reference if gold is None else gold
    mine, theirs = normalize_final_answer(answer), normalize_final_answer(gold)
    if mine and mine == theirs:
        return 1.0
    a, b = _as_number(mine), _as_number(theirs)
    return 1.0 if a is not None and a == b else 0.0
