"""`python -m cosmos_train.cli ...`: the same as `cosmos-train ...` (cosmos_train/cli/__init__.py `main`).

    python -m cosmos_train.cli sft --config configs/tiny-sft.toml

The tests and tasks/reward_service.py (the reward service a flow starts) run the CLI this way.
"""

import sys

from cosmos_train.cli import main

sys.exit(main())
