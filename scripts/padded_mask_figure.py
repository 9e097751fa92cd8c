"""Draw docs/img/padded_mask.png: a constant-shape lookahead step's mask over a static KV cache.

The step (W=3, N=3, G=3) found one pool candidate, a 2-token tree; `ladref.fast.static.pad_step` pads it
to the decoder's one width, (N-1)(W+G) = 12 tokens, with dummies that see only themselves. The
cache has M slots, `length` of them committed, the rest stale or unused. Rendered from the
library's own `build_step_inputs`, `pad_step` and `static_additive`, so the figure cannot drift
from the code.

    python scripts/padded_mask_figure.py [OUT.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ladref.masks import build_step_inputs, static_additive
from ladref.fast.static import pad_step
from ladref.tree import DraftTree

W, N, G, REAL, LENGTH, M = 3, 3, 3, 1, 6, 26


def main(out: str = "docs/img/padded_mask.png") -> Path:
    tree = DraftTree.from_paths([[7, 8]][:REAL], "pool")  # the one candidate found: N-1 = 2 tokens
    step = build_step_inputs(5, torch.zeros(N - 1, W, dtype=torch.long), tree, LENGTH)
    real = step.layout.length
    _, _, allowed = pad_step(step.input_ids, step.position_ids, step.allowed, (N - 1) * (W + G))
    visible = static_additive(allowed, torch.tensor(LENGTH), M, torch.float32)[0, 0] == 0  # (q, M)
    q = allowed.shape[0]
    kind = torch.zeros(q, M, dtype=torch.long)  # 0 hidden, 1 cache, 2 lookahead, 3 candidate, 4 dummy
    kind[:, :LENGTH] = 1
    for col in range(q):
        kind[:, LENGTH + col] = 2 if col < step.layout.lookahead_len else (3 if col < real else 4)
    kind[~visible] = 0
    fig = Figure(figsize=(9, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = ["#f2f2f2", "#7f7f7f", "#4c72b0", "#55a868", "#dd8452"]
    ax.imshow(kind.numpy(), cmap=ListedColormap(colors), vmin=0, vmax=4, aspect="auto", interpolation="nearest")
    ax.axvline(LENGTH - 0.5, color="black", linewidth=1)
    ax.axvline(LENGTH + q - 0.5, color="black", linewidth=1)
    ax.set_xlabel(f"static KV cache slot (M = {M}): committed 0..{LENGTH - 1} | this step's {q} tokens | stale / unused")
    ax.set_ylabel("query: window cells, the tree, then dummies")
    ax.set_title(f"Constant-shape step, W={W} N={N} G={G}: {real} real tokens padded to {q} (orange: dummies)", fontsize=10)
    for i, (name, color) in enumerate(zip(["hidden", "committed cache", "lookahead branch", "draft tree", "dummy"], colors)):
        ax.text(M + 0.8, 1 + 1.6 * i, name, color="black", backgroundcolor=color, fontsize=8)
    ax.set_xlim(-0.5, M + 6)
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    print(main(*sys.argv[1:]))
