"""Read the chosen option out of a model's response.

The reference tool takes the first capital letter anywhere in letter mode, so "The answer is B"
scores as "T". Here the text is first normalised with Unicode NFKC (full-width "Ａｎｓｗｅｒ：Ｂ" reads
as "Answer:B"), then the rules go from the most to the least explicit, and a rule that finds two
different letters gives up rather than guess:

1. an <answer>...</answer> tag (the last one; an unclosed tag runs to the end): only its content
   is read, with the rules below; otherwise the text after </think> is read;
2. the whole text is one letter: "B", "b", "(B)", "B.", "**B**", "[B]";
3. a stated answer, the last one wins: "answer is B", "Answer: (B)", "the correct option is C",
   "I choose D", "Option B", "choice (C)", "\\boxed{B}", "答案：C", "答案是C";
4. a leading letter: "B. The robot ...", "(B) The robot ...", "B) ...", "B: ...", "B - ...";
5. the text of one option ("The robot moves left." when (A) is "The robot moves left");
6. exactly one distinct "(B)" in the text;
7. exactly one distinct lone letter that is an option: a whitespace-separated word that is one
   capital letter once its surrounding punctuation is removed ("so B.", "(B"), never part of a
   word ("hind(A", "B's", "A-frame"); "A"/"I" followed by a lower-case word are English words, not
   letters ("A robot", "I think"), unless the word is a verb ("A is correct"); "A or B" is two
   letters, so no answer.

A letter the text rejects is no candidate for rules 3, 4, 6 and 7: after a negation ("not A",
"the answer is not A", "it can't be B", "neither A nor B", "rule out C") or followed by one ("A is wrong", "B isn't",
"C can be ruled out"). So "Not A; the answer is C" reads C and "the answer is not A" reads nothing.

Degenerate output reads as no answer unless it states one (rules 2-3): rules 4-7 would pick a
letter out of an untrained model's repeated or garbage tokens by chance. Counting the words of the
answer text (runs of letters and digits; a word that is one character repeated, "AAAA", counts as
that many one-letter words), it is degenerate when one word is more than half of at least 3 words
("A A A A", "AAAAAAAA", "B.B.B.B", "the the the the A") or when it has more than twice as many
symbol characters as words plus 3 ("#$%^ A &*()", "��� B ���"; the margin keeps "(B)." readable).

Parsers are registered per answer type in PARSERS (plug-ins: `register_parser`).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_OPEN = re.compile(r"<answer>(.*)$", re.S | re.I)
_THINK_TAG = re.compile(r"<think>(.*?)</think>", re.S | re.I)
_THINK_OPEN = re.compile(r"<think>(.*)$", re.S | re.I)
_MARKDOWN = re.compile(r"[*_`#]+")
_WHOLE = re.compile(r"^[\(\[\{]?\s*([A-Za-z])\s*[\)\]\}]?\s*[\.\:\!]?$")
_STATED = re.compile(
    r"(?:answer|option|choice|choose|chose|pick|select|selected|go with|boxed|答案|选项)"
    r"(?:\s+(?:is|would be|should be|will be|must be|=)|\s*[是为])?\s*[:\-]?\s*"
    r"(?:(?:option|choice|letter)\s*)?[\(\[\{]?([A-Z])[\)\]\}]?(?![A-Za-z0-9'’])",
    re.I,
)
_LEADING = re.compile(r"^[\(\[]?([A-Z])(?:[\)\]]|\.(?=\s|$)|:|\s+[-–—]\s)")
_PAREN = re.compile(r"(?<!\w)\(([A-Z])\)")
_LONE = re.compile(r"(?<!\S)[^\w\s]*([A-Z])[^\w\s]*(?!\S)")
_ARTICLE = re.compile(r"\s+(?!(?:or|and|nor|vs)\b)[a-z]")
# "A is correct": the option as the subject of a verb, not the article.
_VERB = re.compile(
    r"\s+(?:is|isn['’]t|was|seems|looks|appears|fits|matches|does|doesn['’]t|can|cannot|can['’]t|could|"
    r"would|should|must|might)\b"
)
# A negation right before the letter: "not A", "isn't (B)", "can't be C", "wouldn't pick D", "rule out A".
_NEGATED_BEFORE = re.compile(
    r"(?:\bnot|\bcannot|n['’]t|\bnever|\bneither|\bnor|\brather than|\binstead of"
    r"|\brul(?:e|ed|ing) out|\beliminat\w*|\bexclud\w*)"
    r"(?:\s+(?:be|choose|pick|select|say|go with|option|choice|letter))*\s*[\(\[]?$",
    re.I,
)
# A rejection right after the letter: "A is wrong", "(B) is not", "C isn't", "D can be ruled out", "A: wrong".
_NEGATED_AFTER = re.compile(
    r"[\)\]]?\s*(?:"
    r"[:\-–—]\s*(?:wrong|incorrect|false)\b"
    r"|(?:(?:is|are|was|does|do|seems|looks|appears|can|could|would|should|must|be|been|also|clearly|definitely|"
    r"probably|certainly|obviously)\s+)+(?:not|never|wrong|incorrect|false|invalid|impossible|unlikely|"
    r"ruled out|eliminated|excluded)\b"
    r"|(?:is|are|was|does|do|can|could|would|should)n['’]t\b|cannot\b)",
    re.I,
)
_WORD = re.compile(r"[^\W_]+")
_SYMBOL = re.compile(r"[^\w\s]")


@dataclass(frozen=True)
class ParsedResponse:
    """What one response says: the answer (None when unreadable) and its reasoning text."""

    answer: str | None
    reasoning: str


def answer_tag(text: str) -> str | None:
    """Content of the last <answer>...</answer>, or of an unclosed <answer> running to the end."""
    closed = _ANSWER_TAG.findall(text)
    if closed:
        return closed[-1].strip()
    m = _ANSWER_OPEN.search(text)
    return m.group(1).strip() if m else None


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning inside <think>, the text after it). Without think tags: ("", text)."""
    m = _THINK_TAG.search(text)
    if m:
        return m.group(1).strip(), text[m.end() :]
    if "</think>" in text.lower():  # templates that put <think> in the prompt
        idx = text.lower().rindex("</think>")
        return text[:idx].strip(), text[idx + len("</think>") :]
    m = _THINK_OPEN.search(text)
    if m:  # truncated inside the reasoning: no answer part
        return m.group(1).strip(), ""
    return "", text


def _nfkc(s: str) -> str:
    # Full-width letters and punctuation ("Ａｎｓｗｅｒ：（Ｂ）") as their ASCII forms.
    return unicodedata.normalize("NFKC", s)


def _norm(s: str) -> str:
    s = _nfkc(s).lower().translate(str.maketrans(string.punctuation, " " * len(string.punctuation)))
    return " ".join(s.split())


def _unique(found: list[str]) -> str | None:
    distinct = set(found)
    return found[0] if len(distinct) == 1 else None


def is_degenerate(text: str) -> bool:
    """Repeated or garbage output (see the module docstring): no answer, whatever letter it holds."""
    words: list[str] = []
    for w in _WORD.findall(text):
        # "AAAAAAAA" is the letter A repeated, as "A A A A A A A A" is.
        words += [w[0]] * len(w) if len(w) > 1 and len(set(w)) == 1 else [w]
    if len(words) >= 3 and 2 * Counter(words).most_common(1)[0][1] > len(words):
        return True
    return len(_SYMBOL.findall(text)) > 2 * len(words) + 3


def _rejected(s: str, m: re.Match[str]) -> bool:
    """Whether the text rejects the letter of `m` (group 1): "not A", "A is wrong"."""
    start, end = m.span(1)
    # A window, so a long reasoning text costs no more per letter than a short one.
    return bool(_NEGATED_BEFORE.search(s[max(0, start - 40) : start]) or _NEGATED_AFTER.match(s, end))


def letter_from_text(text: str, options: Mapping[str, str]) -> str | None:
    """Rules 2-7 of the module docstring on a text without tags (NFKC-normalised by the caller)."""
    valid = {k.upper() for k in options if len(k) == 1} or set(string.ascii_uppercase)
    s = _MARKDOWN.sub("", text).strip().strip("\"'“”‘’").strip()
    if not s:
        return None
    m = _WHOLE.match(s)
    if m and m.group(1).upper() in valid:
        return m.group(1).upper()
    # A lower-case letter only counts at the very end ("... the answer is b."), never in "is a robot".
    stated = [
        m.group(1).upper()
        for m in _STATED.finditer(s)
        if m.group(1).upper() in valid
        and (m.group(1).isupper() or not s[m.end() :].strip(" .!"))
        and not _rejected(s, m)
    ]
    if stated:
        return stated[-1]
    # Below, the rules read letters the text does not state as its answer: not in repeated or garbage output.
    if is_degenerate(s):
        return None
    m = _LEADING.match(s)
    if m and m.group(1) in valid and not _rejected(s, m):
        # "(A) and (C) both fit" lists options rather than choosing one.
        others = {x for x in _PAREN.findall(s) if x in valid} - {m.group(1)}
        return None if s.startswith("(") and others else m.group(1)
    by_text = _option_text_match(s, options)
    if by_text is not None:
        return by_text
    paren = _unique([m.group(1) for m in _PAREN.finditer(s) if m.group(1) in valid and not _rejected(s, m)])
    if paren is not None:
        return paren
    lone = [m.group(1) for m in _LONE.finditer(s) if m.group(1) in valid and not _is_word(s, m) and not _rejected(s, m)]
    return _unique(lone)


def _is_word(s: str, m: re.Match[str]) -> bool:
    # "A robot ..." / "I think ...": the article / pronoun, not an option letter; "A is ..." is the option.
    letter, after = m.group(1), m.end(1)
    if letter == "A":
        return bool(_ARTICLE.match(s, after)) and not _VERB.match(s, after)
    return letter == "I" and bool(_ARTICLE.match(s, after))


def _option_text_match(s: str, options: Mapping[str, str]) -> str | None:
    text = _norm(s)
    normed = {k.upper(): _norm(v) for k, v in options.items() if _norm(v)}
    exact = [k for k, v in normed.items() if v == text]
    if len(exact) == 1:
        return exact[0]
    padded = f" {text} "
    contained = [k for k, v in normed.items() if f" {v} " in padded]
    if not contained:
        return None
    longest = max(contained, key=lambda k: len(normed[k]))
    # "moves left and up" contains "moves left": the longer option wins when it holds the others.
    if all(f" {normed[k]} " in f" {normed[longest]} " for k in contained):
        return longest
    return None


def parse_letter(text: str, options: Mapping[str, str]) -> ParsedResponse:
    """The option letter a response chooses (None when it cannot be read) and its <think> reasoning."""
    reasoning = split_reasoning(text)[0]  # the model's own characters, for the record
    text = _nfkc(text)
    tag = answer_tag(text)
    answer_text = tag if tag is not None else split_reasoning(text)[1]
    return ParsedResponse(letter_from_text(answer_text, options), reasoning)


def parse_freeform(text: str, options: Mapping[str, str]) -> ParsedResponse:
    """Free-form: the <answer> content, else the text after the reasoning, stripped."""
    reasoning, rest = split_reasoning(text)
    tag = answer_tag(text)
    answer = (tag if tag is not None else rest).strip()
    return ParsedResponse(answer or None, reasoning)


def freeform_equal(answer: str | None, reference: str) -> bool:
    """Case-insensitive exact match, ignoring punctuation and spacing (the reference's rule)."""
    return answer is not None and _norm(answer) == _norm(reference)


Parser = Callable[[str, Mapping[str, str]], ParsedResponse]
PARSERS: dict[str, Parser] = {"letter": parse_letter, "reasoning": parse_letter, "freeform": parse_freeform}


def register_parser(answer_type: str) -> Callable[[Parser], Parser]:
    """Decorator: use `fn(text, options) -> ParsedResponse` for `answer_type`."""

    def deco(fn: Parser) -> Parser:
        PARSERS[answer_type] = fn
        return fn

    return deco


def parse_response(text: str, answer_type: str, options: Mapping[str, str]) -> ParsedResponse:
    try:
        parser = PARSERS[answer_type]
    except KeyError:
        raise ValueError(f"no answer parser for answer_type {answer_type!r}; known: {sorted(PARSERS)}") from None
    return parser(text, options)


def is_correct(answer: str | None, reference: str, answer_type: str, options: Mapping[str, str]) -> bool:
    if answer is None:
        return False
    if answer_type == "freeform" or not options:
        return freeform_equal(answer, reference)
    return answer.strip().upper() == reference.strip().upper()
