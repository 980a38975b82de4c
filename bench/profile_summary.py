"""Rank where CPU samples go in a ``py-spy record --format raw`` profile (collapsed stacks).

``bench/bench_stages.py --profile DIR --profile-format raw`` writes ``DIR/web.txt`` and
``DIR/worker.txt``; this prints, per file: the samples, the share of samples *inside* each of the
project's functions (inclusive, each stack counted once per function), and the share spent in each
library or project package at the leaf (self time). Run before and after a change:

    .venv/bin/python bench/profile_summary.py DIR/web.txt DIR/worker.txt [--top 25] [--within FUNC]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+)(?::\d+)?\)$")
#: Project packages (inclusive ranking); everything else is grouped by its top-level package.
PROJECT = ("muse_experiments/", "routing/", "analytics/")


def parse(text: str) -> list[tuple[list[tuple[str, str]], int]]:
    """Collapsed stacks → ``[([(function, file), …root first], samples)]`` (the leading
    ``process N:"cmd"`` and thread frames without a file are dropped)."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for raw in stack.split(";"):
            m = FRAME.match(raw)
            if m:
                frames.append((m["func"], m["file"]))
        out.append((frames, int(count)))
    return out


def package_of(file: str) -> str:
    """``django/db``, ``psycopg``, ``routing/pipeline/recording.py`` … for a frame's file path."""
    if file.startswith(PROJECT):
        return file
    parts = file.split("/")
    if parts[0] in ("django", "rest_framework") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else f"stdlib:{file}"


def summarise(stacks: list[tuple[list[tuple[str, str]], int]]) -> tuple[int, Counter, Counter, Counter]:
    """``(total samples, inclusive samples per project function, samples per innermost project
    frame with the package it was in (where project code hands off to a library), self samples
    per package)``."""
    total = sum(n for _, n in stacks)
    inclusive: Counter = Counter()
    handoff: Counter = Counter()
    self_time: Counter = Counter()
    for frames, n in stacks:
        seen = {f"{func} ({file})" for func, file in frames if file.startswith(PROJECT)}
        for key in seen:
            inclusive[key] += n
        if frames:
            self_time[package_of(frames[-1][1])] += n
            inner = [(i, f) for i, f in enumerate(frames) if f[1].startswith(PROJECT)]
            if inner:
                i, (func, file) = inner[-1]
                line = frames[i + 1][1] if i + 1 < len(frames) else ""
                handoff[f"{func} ({file}) → {package_of(line) if line else 'self'}"] += n
    return total, inclusive, handoff, self_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", type=Path, nargs="+")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--within",
        help="only stacks through this function name (e.g. run_completion, ChatCompletionsApi.post): "
        "with --idle profiles, the time of one request or task instead of idle pool threads",
    )
    args = parser.parse_args()
    for path in args.profiles:
        stacks = parse(path.read_text())
        if args.within:
            stacks = [(f, n) for f, n in stacks if any(func == args.within for func, _ in f)]
        total, inclusive, handoff, self_time = summarise(stacks)
        if not total:
            print(f"\n{path}: no samples" + (f" through {args.within}" if args.within else ""))
            continue
        print(f"\n{path}: {total} samples")
        print(f"  inside project functions (inclusive, top {args.top}):")
        for key, n in inclusive.most_common(args.top):
            print(f"    {n / total * 100:5.1f}%  {key}")
        print(f"  innermost project function → the library it called (top {args.top}):")
        for key, n in handoff.most_common(args.top):
            print(f"    {n / total * 100:5.1f}%  {key}")
        print(f"  self time by package (top {args.top}):")
        for key, n in self_time.most_common(args.top):
            print(f"    {n / total * 100:5.1f}%  {key}")


if __name__ == "__main__":
    main()
