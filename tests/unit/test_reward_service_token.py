"""The reward service's token rule (`server.resolve_token`): at least 16 characters, at least 8 of them different;
the refusal is one paragraph naming the variable, the rule and how to make a good token, and never echoes the token.
Every token the project itself makes or uses passes."""

from __future__ import annotations

import secrets

import pytest

from cosmos_train.errors import AuthError
from cosmos_train.reward_service.auth import MIN_DISTINCT_TOKEN_CHARS, TOKEN_ENV
from cosmos_train.reward_service.server import resolve_token
from tests.reward_server import TOKEN

# the literal tokens of tests/ and bench/ (tests/reward_server.py's TOKEN is imported above)
PROJECT_TOKENS = ["restart-test-token", "s3cret-token-5e2f-a9", "cli-secret-4b1d-93a0", "bench-token-0c7e-4d2a"]


def _token(value: str) -> str | None:
    return resolve_token("127.0.0.1", False, env={TOKEN_ENV: value})


@pytest.mark.parametrize(
    ("token", "distinct"),
    [("a" * 16, 1), ("ab" * 16, 2), ("0123456" * 4, 7), ("x" * 63 + "yz", 3)],
)
def test_a_token_of_few_different_characters_is_refused(token: str, distinct: int) -> None:
    with pytest.raises(AuthError) as refused:
        _token(token)
    text = refused.value.paragraph
    assert "\n" not in text and token not in text
    assert text.startswith(f"reward service: {TOKEN_ENV} is made of only {distinct} different character(s)")
    assert f"at least {MIN_DISTINCT_TOKEN_CHARS} different" in text and "secrets.token_urlsafe(32)" in text


def test_eight_different_characters_are_enough() -> None:
    assert _token("01234567" * 2) == "01234567" * 2


@pytest.mark.parametrize("token", [TOKEN, *PROJECT_TOKENS])
def test_the_project_tokens_pass(token: str) -> None:
    assert _token(token) == token


def test_generated_tokens_pass() -> None:
    """The flow's own (tasks/reward_service.py: token_urlsafe(32)) and docs/grpo.md's (token_hex(16)) recipes."""
    for _ in range(200):
        for token in (secrets.token_urlsafe(32), secrets.token_hex(16)):
            assert _token(token) == token


def test_length_is_still_checked_first() -> None:
    with pytest.raises(AuthError, match="is 15 characters; a token needs at least 16"):
        _token("abcdefghijklmno")
