"""Figures people would rather look at than read: parity, error histograms, error by partition and by size."""

from __future__ import annotations

import numpy as np
import pandas as pd

from joulecast.training.evaluate import QUANTITIES


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def parity_figure(frame: pd.DataFrame, title: str = "energy per iteration, estimated vs measured"):
    plt = _pyplot()
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


def error_histogram(frame: pd.DataFrame, target: float):
    """Signed percentage error of energy, time and power, with the target band."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=True)
    for ax, (q, col) in zip(axes, QUANTITIES):
        err = (frame[f"pred_{col}"] / frame[col] - 1).to_numpy() * 100
        ax.hist(np.clip(err, -100, 100), bins=40, color="tab:blue", alpha=0.8)
        ax.axvspan(-target, target, color="tab:green", alpha=0.12, label=f"±{target:g} % target")
        ax.set(xlabel=f"{q} error (%), estimated vs measured", title=f"{q}: MAPE {np.mean(np.abs(err)):.1f} %")
    axes[0].set_ylabel("rows")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def partition_figure(partitions: pd.DataFrame, target: float):
    """Energy and power MAPE per partition, one panel per partition kind; failing gated partitions in red."""
    plt = _pyplot()
    kinds = list(dict.fromkeys(partitions["by"]))
    heights = [max(1.2, 0.28 * (partitions["by"] == k).sum() + 0.6) for k in kinds]
    fig, axes = plt.subplots(len(kinds), 1, figsize=(8, sum(heights)), gridspec_kw={"height_ratios": heights})
    for ax, kind in zip(np.atleast_1d(axes), kinds):
        part = partitions[partitions["by"] == kind].reset_index(drop=True)
        y = np.arange(len(part))
        colours = ["tab:red" if g and p is False else ("tab:green" if g else "tab:gray")
                   for g, p in zip(part["gated"], part["pass"])]
        ax.barh(y - 0.2, part["energy_mape"], height=0.4, color=colours, label="energy")
        ax.barh(y + 0.2, part["power_mape"], height=0.4, color=colours, alpha=0.45, label="power")
        ax.axvline(target, color="k", linestyle="--", linewidth=0.8)
        ax.set_yticks(y, [f"{v} ({n})" for v, n in zip(part["value"], part["rows"])], fontsize=8)
        ax.set_title(f"by {kind}: MAPE % (solid energy, light power; red fails, grey not gated)", fontsize=9)
    fig.tight_layout()
    return fig


def size_figure(frame: pd.DataFrame):
    """Energy error against batch size and sequence length (rows without one are left out of that panel)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, column in zip(axes, ("batch", "seq")):
        values = pd.to_numeric(frame[column], errors="coerce")
        for gpu, part in frame[values.notna()].groupby("gpu"):
            ax.scatter(pd.to_numeric(part[column]), part["ape_energy"], s=10, alpha=0.6, label=str(gpu))
        ax.set(xscale="log", xlabel={"batch": "batch size", "seq": "sequence length (tokens)"}[column])
    axes[0].set_ylabel("energy absolute error (%)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
