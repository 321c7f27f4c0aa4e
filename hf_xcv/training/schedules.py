"""The learning-rate schedule of "Attention Is All You Need" (Section 5.3).

    lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

a linear warm-up to its peak at ``warmup_steps``, then decay with the inverse square root of the step.
As a ``LambdaLR`` it multiplies the optimizer's base learning rate, so an optimizer built with ``lr=1.0``
follows the paper's absolute values. Works with accelerate scripts and with ``Trainer(optimizers=...)``.
"""

from __future__ import annotations

import functools

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from ..utils.checks import check_int, check_positive_float


def noam_factor(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The paper's rate at optimisation step ``step`` (0-based: the first update uses step 1 of the formula)."""
    step = step + 1
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def get_noam_schedule(
    optimizer: Optimizer, d_model: int, warmup_steps: int = 4000, factor: float = 1.0, last_epoch: int = -1
) -> LambdaLR:
    """``LambdaLR`` following :func:`noam_factor` (paper: warmup_steps=4000, Adam betas (0.9, 0.98), eps 1e-9)."""
    check_int("d_model", d_model)
    check_int("warmup_steps", warmup_steps)
    check_positive_float("factor", factor)
    schedule = functools.partial(noam_factor, d_model=d_model, warmup_steps=warmup_steps, factor=factor)
    return LambdaLR(optimizer, schedule, last_epoch=last_epoch)
