"""Read the chosen option out of a model's response.

The reference tool takes the first capital letter anywhere in letter mode, so "The answer is B"
scores as "T". Here the rules go from the most to the least explicit, and a rule that finds two
different letters gives up rather than guess:

1. an <answer>...</answer> tag (the last one; an unclosed tag runs to the end): only its content
   is read, with the rules below; otherwise the text after </think> is read;
2. the whole text is one letter: "B", "b", "(B)", "B.", "**B**", "[B]";
3. a stated answer, the last one wins: "answer is B", "Answer: (B)", "the correct option is C",
   "I choose D", "Option B", "choice (C)";
4. a leading letter: "B. The robot ...", "(B) The robot ...", "B) ...", "B: ...", "B - ...";
5. the text of one option ("The robot moves left." when (A) is "The robot moves left");
6. exactly one distinct "(B)" in the text;
7. exactly one distinct lone capital letter that is an option ("A"/"I" followed by a lower-case
   word are English words, not letters; "A or B" is two letters, so no answer).

Parsers are registered per answer type in PARSERS (plug-ins: `register_parser`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_OPEN = re.compile(r"<answer>(.*)$", re.S | re.I)
_THINK_TAG = re.compile(r"<think>(.*?)</think>", re.S | re.I)
_THINK_OPEN = re.compile(r"<think>(.*)$", re.S | re.I)
_MARKDOWN = re.compile(r"[*_`#]+")
_WHOLE = re.compile(r"^[\(\[\{]?\s*([A-Za-z])\s*[\)\]\}]?\s*[\.\:\!]?$")
_STATED = re.compile(
    r"(?:answer|option|choice|choose|chose|pick|select|selected|go with)"
    r"(?:\s+(?:is|would be|should be|will be|must be|=))?\s*[:\-]?\s*"
    r"(?:(?:option|choice|letter)\s*)?[\(\[]?([A-Z])[\)\]]?(?![A-Za-z0-9'’])",
    re.I,
)
_LEADING = re.compile(r"^[\(\[]?([A-Z])(?:[\)\]]|\.(?=\s|$)|:|\s+[-–—]\s)")
_PAREN = re.compile(r"\(([A-Z])\)")
_LONE = re.compile(r"(?<![A-Za-z0-9'’])([A-Z])(?![A-Za-z0-9'’])")
_ARTICLE = re.compile(r"\s+(?!(?:or|and|nor|vs)\b)[a-z]")


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


def _norm(s: str) -> str:
    s = s.lower().translate(str.maketrans(string.punctuation, " " * len(string.punctuation)))
    return " ".join(s.split())


def _unique(found: list[str]) -> str | None:
    distinct = set(found)
    return found[0] if len(distinct) == 1 else None


def letter_from_text(text: str, options: Mapping[str, str]) -> str | None:
    """Rules 2-7 of the module docstring on a text without tags."""
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
        if m.group(1).upper() in valid and (m.group(1).isupper() or not s[m.end() :].strip(" .!"))
    ]
    if stated:
        return stated[-1]
    m = _LEADING.match(s)
    if m and m.group(1) in valid:
        # "(A) and (C) both fit" lists options rather than choosing one.
        others = {x for x in _PAREN.findall(s) if x in valid} - {m.group(1)}
        return None if s.startswith("(") and others else m.group(1)
    by_text = _option_text_match(s, options)
    if by_text is not None:
        return by_text
    paren = _unique([x for x in _PAREN.findall(s) if x in valid])
    if paren is not None:
        return paren
    lone = [m.group(1) for m in _LONE.finditer(s) if m.group(1) in valid and not _is_word(s, m)]
    return _unique(lone)


def _is_word(s: str, m: re.Match[str]) -> bool:
    # "A robot ..." / "I think ...": the article / pronoun, not an option letter.
    return m.group(1) in ("A", "I") and bool(_ARTICLE.match(s, m.end()))


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
    reasoning, rest = split_reasoning(text)
    tag = answer_tag(text)
    if tag is not None:
        return ParsedResponse(letter_from_text(tag, options), reasoning)
    return ParsedResponse(letter_from_text(rest, options), reasoning)


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
