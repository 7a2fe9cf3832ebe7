"""Figures people would rather look at than read: parity of estimated against measured energy."""

from __future__ import annotations

import pandas as pd


def parity_figure(frame: pd.DataFrame, title: str = "energy per iteration, estimated vs measured"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for gpu, part in frame.groupby("gpu"):
        ax.scatter(part["energy_j"], part["pred_energy_j"], s=10, alpha=0.7, label=str(gpu))
        if "lo_energy_j" in part:
            ax.vlines(part["energy_j"], part["lo_energy_j"], part["hi_energy_j"], alpha=0.25, linewidth=0.8)
    low = float(min(frame["energy_j"].min(), frame["pred_energy_j"].min()))
    high = float(max(frame["energy_j"].max(), frame["pred_energy_j"].max()))
    ax.plot([low, high], [low, high], "k--", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured energy (J)", ylabel="estimated energy (J)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
