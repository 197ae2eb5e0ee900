"""How flows and tasks fail: retries only where a retry can help, and a user error shown as itself.

- `retry_only_crashes`: the retry condition of every retried task. A UserError (bad config, data,
  media, benchmark, checkpoint ...) fails the same way every time, and so do a RepeatedFailure and an
  OSError on a path the user must fix (`cosmos_train.errors.user_error_of`: a file where a folder is
  needed, no permission, a read-only or full disk); anything else is a crash (a signal, an OOM kill, a
  collective timeout, a lost file system) and is retried.
- `user_errors_reported(what)`: wraps a flow body. A UserError (or such an OSError, raised as its
  UserError) leaves a markdown artifact `error` with its paragraph and what kind of input to fix, then
  fails the flow run with that error, so the run's state message is that paragraph. Internal errors
  pass through with their traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect.artifacts import create_markdown_artifact

from cosmos_train.errors import RepeatedFailure, RunHalted, UserError, user_error_of


def retry_only_crashes(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: True for a crash, False for a user error or a repeated crash."""
    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # the result itself is unreadable: treat as a crash
        return True
    if not isinstance(error, BaseException):
        return True
    return not (isinstance(error, RepeatedFailure) or user_error_of(error) is not None)


def failure_markdown(what: str, error: UserError) -> str:
    if isinstance(error, RunHalted):
        after = (
            "The run stopped with its state saved (not a crash, so not retried): once what the message names is "
            "resolved, rerun the command with the run folder to continue it.\n"
        )
    else:
        after = (
            "This is a problem with the input, not a crash: a retry would fail the same way, so the run stops "
            "here. Fix what the message names and run again.\n"
        )
    return f"# {what} stopped: {error.kind} error\n\n```\n{error.paragraph}\n```\n\n" + after


@contextmanager
def user_errors_reported(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as e:
        error = user_error_of(e)
        if error is None:
            raise
        create_markdown_artifact(failure_markdown(what, error), key="error", description=f"{what}: {error.kind} error")
        if error is e:
            raise
        raise error from e
