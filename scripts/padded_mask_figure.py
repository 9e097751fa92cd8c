"""Draw docs/img/padded_mask.png: a constant-shape lookahead step's mask over a static KV cache.

The step (W=3, N=3, G=3) found g=1 pool candidate, so two candidate rows are dummies; the cache
has M slots, `length` of them committed, the rest stale or unused. Rendered from the library's
own `StepLayout.allowed` and `static_additive`, so the figure cannot drift from the code.

    python scripts/padded_mask_figure.py [OUT.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ladref.masks import StepLayout, static_additive

W, N, G, REAL, LENGTH, M = 3, 3, 3, 1, 6, 26


def main(out: str = "docs/img/padded_mask.png") -> Path:
    layout = StepLayout(W, N, G)
    allowed = layout.allowed()
    visible = static_additive(allowed, torch.tensor(LENGTH), M, torch.float32)[0, 0] == 0  # (q, M)
    q = allowed.shape[0]
    dummy = layout.candidate_index()[REAL:].flatten()
    kind = torch.zeros(q, M, dtype=torch.long)  # 0 hidden, 1 cache, 2 lookahead, 3 candidate, 4 dummy
    kind[:, :LENGTH] = 1
    for col in range(q):
        role = 2 if col < layout.lookahead_len else (4 if col in dummy else 3)
        kind[:, LENGTH + col] = role
    kind[~visible] = 0
    fig = Figure(figsize=(9, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = ["#f2f2f2", "#7f7f7f", "#4c72b0", "#55a868", "#dd8452"]
    ax.imshow(kind.numpy(), cmap=ListedColormap(colors), vmin=0, vmax=4, aspect="auto", interpolation="nearest")
    ax.axvline(LENGTH - 0.5, color="black", linewidth=1)
    ax.axvline(LENGTH + q - 0.5, color="black", linewidth=1)
    ax.set_xlabel(f"static KV cache slot (M = {M}): committed 0..{LENGTH - 1} | this step's {q} tokens | stale / unused")
    ax.set_ylabel("query: window rows, then G candidate rows")
    ax.set_title(f"Constant-shape step, W={W} N={N} G={G}: 1 real candidate, {G - REAL} dummy rows (orange)", fontsize=10)
    for i, (name, color) in enumerate(zip(["hidden", "committed cache", "lookahead branch", "candidate", "dummy row"], colors)):
        ax.text(M + 0.8, 1 + 1.6 * i, name, color="black", backgroundcolor=color, fontsize=8)
    ax.set_xlim(-0.5, M + 6)
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    print(main(*sys.argv[1:]))
